// Variant ids (generator/variants.h) from arbitrary text. Invariants: an
// accepted id names a valid variant whose printed id parses back to it.
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "generator/variants.h"

using namespace attune;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Variant variant;
  try {
    variant = parse_variant_id(text);
  } catch (const Error&) {
    return 0;
  }
  fuzz::check(variant.kernel != nullptr, "no kernel");
  fuzz::check(variant.kernel->valid(variant.values), "accepted an invalid variant");
  fuzz::check(variant.threads() > 0 && variant.shared_bytes() >= 0, "threads or shared bytes");
  const std::string id = variant.id();
  fuzz::check(parse_variant_id(id) == variant, "id round trip");
  fuzz::check(parse_variant_id(id).id() == id, "id is not canonical");
  return 0;
}
