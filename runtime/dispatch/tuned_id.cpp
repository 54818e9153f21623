#include "runtime/dispatch/tuned_id.h"

#include <charconv>

#include "core/error.h"
#include "runtime/launch/flash_decode_params.h"

namespace attune {

namespace {
constexpr std::string_view kSplits = "/splits";
}

std::string tuned_id(const Variant& variant, int splits) {
  return splits > 0 ? variant.id() + std::string(kSplits) + std::to_string(splits) : variant.id();
}

TunedChoice parse_tuned_id(std::string_view id) {
  const std::size_t at = id.rfind(kSplits);
  if (at == std::string_view::npos) return {parse_variant_id(id), 0};
  const std::string_view count = id.substr(at + kSplits.size());
  int splits = 0;
  const auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), splits);
  if (count.empty() || error != std::errc() || end != count.data() + count.size()) {
    throw InvalidArgument("tuned choice \"" + std::string(id) + "\": split count \"" + std::string(count) +
                          "\" is not a number; expected VARIANT/splitsN");
  }
  check_splits(splits);
  TunedChoice choice{parse_variant_id(id.substr(0, at)), splits};
  if (choice.variant.kernel->id != KernelId::kFlashDecode) {
    throw InvalidArgument("tuned choice \"" + std::string(id) + "\": " + std::string(choice.variant.kernel->name) +
                          " takes no split count; expected a flash_decode variant");
  }
  return choice;
}

}  // namespace attune
