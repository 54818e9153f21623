// The .npy reader (io/npy.h) on arbitrary bytes. Invariants: an accepted
// array's bytes match its shape and type, its conversions have one value per
// element, and what is written back reads back the same.
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/parsed_input.h"
#include "io/npy.h"

using namespace attune;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<npy::Array> parsed = fuzz::parse_input_file(data, size, npy::read);
  if (!parsed) return 0;  // refused with a message: fine
  const npy::Array& array = *parsed;
  const int64_t count = array.size();
  fuzz::check(count >= 0, "negative element count");
  fuzz::check(array.bytes.size() == static_cast<std::size_t>(count) * npy::element_size(array.type),
              "bytes do not match shape x element size");
  const bool integer = array.type == npy::ElementType::kInt32 || array.type == npy::ElementType::kInt64;
  if (integer) {
    try {
      const std::vector<int32_t> values = array.to_int32("input.npy");
      fuzz::check(values.size() == static_cast<std::size_t>(count), "to_int32 count");
      const std::filesystem::path out = fuzz::scratch_directory() / "int32.npy";
      npy::write(out, array.shape, values);
      const npy::Array back = npy::read(out);
      fuzz::check(back.shape == array.shape && back.to_int32("back") == values, "int32 round trip");
    } catch (const IoError&) {
      // int64 values outside int32: refused with a message
    }
  } else {
    const std::vector<float> values = array.to_float32();
    fuzz::check(values.size() == static_cast<std::size_t>(count), "to_float32 count");
    const std::filesystem::path out = fuzz::scratch_directory() / "float32.npy";
    npy::write(out, array.shape, values);
    const npy::Array back = npy::read(out);
    const std::vector<float> again = back.to_float32();
    fuzz::check(back.shape == array.shape && again.size() == values.size() &&
                    (values.empty() || std::memcmp(again.data(), values.data(), values.size() * sizeof(float)) == 0),
                "float32 round trip");
  }
  return 0;
}
