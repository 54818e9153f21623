// A covering set of an operation's variants: every value of every tunable
// and (forward) every warp partition (warps_m x warps_n) at least once,
// chosen greedily over all head-dim buckets on an architecture; ties go to
// the smaller head dim.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "generated/kernel_shapes.h"
#include "generator/variants.h"

namespace attune::testing {

inline std::vector<Variant> covering_set(const ArchLimits& arch, std::string_view op = "fwd") {
  const KernelSpec& kernel = kernel_for_op(op);
  const bool partitions = op == "fwd";
  std::vector<Variant> candidates;
  for (int d : kernel.tunables.front().values) {
    for (Variant& v : enumerate_variants(op, DType::kBF16, d, d, arch)) candidates.push_back(std::move(v));
  }
  const auto features = [&](const Variant& v) {
    std::set<std::string> f;
    for (std::size_t i = 0; i < v.values.size(); ++i) {
      f.insert(std::string(kernel.tunables[i].name) + "=" + std::to_string(v.values[i]));
    }
    if (partitions) {
      const FlashFwdShape shape = FlashFwdShape::of(v);
      f.insert("partition=" + std::to_string(shape.warps_m) + "x" + std::to_string(shape.warps_n));
    }
    return f;
  };
  std::set<std::string> uncovered;
  for (const Variant& v : candidates) {
    for (const std::string& f : features(v)) uncovered.insert(f);
  }
  std::vector<Variant> chosen;
  while (!uncovered.empty()) {
    const Variant* best = nullptr;
    std::size_t best_gain = 0;
    for (const Variant& v : candidates) {
      std::size_t gain = 0;
      for (const std::string& f : features(v)) gain += uncovered.count(f);
      if (gain > best_gain || (gain == best_gain && best != nullptr && gain > 0 && v.values[0] < best->values[0])) {
        best = &v;
        best_gain = gain;
      }
    }
    for (const std::string& f : features(*best)) uncovered.erase(f);
    chosen.push_back(*best);
  }
  return chosen;
}

}  // namespace attune::testing
