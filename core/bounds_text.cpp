#include "core/bounds_text.h"

namespace attune {

std::string describe_bounds_report(const BoundsReport& r) {
  if (r.magic != kBoundsReportMagic) return {};
  const std::string batch = std::to_string(r.batch);
  if (r.kind == kBoundsLength) {
    return "a run was given a key length of " + std::to_string(r.value) + " for sequence " + batch + ", past the " +
           std::to_string(r.limit) + " keys its block-table row (or Sk) addresses: the kernel read " +
           std::to_string(r.limit) + " keys, so that run's output is wrong";
  }
  if (r.kind == kBoundsPage) {
    return "a run read block_table[" + batch + ", " + std::to_string(r.index) + "] = " + std::to_string(r.value) +
           ", outside the page pool of " + std::to_string(r.limit) +
           " pages: the kernel read page 0 instead, so that run's output is wrong";
  }
  return "a bounds report of unknown kind " + std::to_string(r.kind);
}

}  // namespace attune
