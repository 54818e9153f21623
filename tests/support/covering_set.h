// A covering set of an operation's variants: every value of every tunable
// and (forward) every warp partition (warps_m x warps_n) at least once,
// chosen greedily over all head-dim buckets on an architecture; ties go to
// the smaller head dim.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "generated/kernel_shapes.h"
#include "generator/variants.h"
#include "tests/support/families.h"

namespace attune::testing {

// Every enumerated variant of one kernel family (flash_fwd_sm90 as well as
// the op's portable kernel) at Dk = Dv; `bucket` > 0: of that head-dim
// bucket only.
inline std::vector<Variant> family_variants(const KernelSpec& kernel, const ArchLimits& arch, int bucket = 0,
                                            DType dtype = DType::kBF16) {
  std::vector<Variant> out;
  for (int d : kernel.tunables.front().values) {
    if (bucket > 0 && d != bucket) continue;
    for (Variant& v : enumerate_variants(op_of(kernel), dtype, d, d, arch)) {
      if (v.kernel == &kernel) out.push_back(std::move(v));
    }
  }
  return out;
}

// Of one kernel family; `bucket` > 0: of that head-dim bucket only.
inline std::vector<Variant> covering_set_of(const KernelSpec& kernel, const ArchLimits& arch, int bucket = 0) {
  const bool partitions = kernel.id == KernelId::kFlashFwd;
  const std::vector<Variant> candidates = family_variants(kernel, arch, bucket);
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

inline std::vector<Variant> covering_set(const ArchLimits& arch, std::string_view op = "fwd") {
  return covering_set_of(kernel_for_op(op), arch);
}

// Fails for every value of every tunable of the op's kernel that `set`
// leaves out; prints the set.
inline void expect_covers_every_tunable_value(const std::vector<Variant>& set, const KernelSpec& kernel) {
  for (std::size_t i = 0; i < kernel.tunables.size(); ++i) {
    for (int value : kernel.tunables[i].values) {
      const bool present = std::any_of(set.begin(), set.end(), [&](const Variant& v) { return v.values[i] == value; });
      EXPECT_TRUE(present) << kernel.tunables[i].name << "=" << value;
    }
  }
  std::cout << "covering set (" << set.size() << "):";
  for (const Variant& v : set) std::cout << " " << v.id();
  std::cout << "\n";
}
inline void expect_covers_every_tunable_value(const std::vector<Variant>& set, std::string_view op) {
  expect_covers_every_tunable_value(set, kernel_for_op(op));
}

// Both dtypes across a set, by a variant's place in it.
inline DType dtype_by_place(const std::vector<Variant>& set, const Variant& variant) {
  const auto place = static_cast<std::size_t>(std::find(set.begin(), set.end(), variant) - set.begin());
  return place % 2 == 0 ? DType::kBF16 : DType::kF16;
}

// Runs `check` on the families a forward covering-set variant runs: the seed
// families, then FlashAttention's odd sequence-length pairs with head dims
// that fill its bucket on one side only (Dk = d, Dv = d - 8); both in the
// dtype of the variant's place in `set`, which it returns.
inline DType check_covering_families(const std::vector<Variant>& set, const Variant& variant,
                                     void (*check)(const Variant&, const std::vector<Family>&)) {
  const DType dtype = dtype_by_place(set, variant);
  check(variant, seed_families(dtype));
  const int d = variant.values.front();
  check(variant, odd_length_families(dtype, d, d - 8));
  return dtype;
}

}  // namespace attune::testing

namespace attune {
// How GoogleTest prints a variant parameter: its id (else as raw bytes).
// NOLINTNEXTLINE(readability-identifier-naming)
inline void PrintTo(const Variant& v, std::ostream* out) { *out << v.id(); }
}  // namespace attune

namespace attune::testing {

// A variant as a test name: flash_fwd/d64.bm64 -> flash_fwd_d64_bm64.
inline std::string variant_test_name(const ::testing::TestParamInfo<Variant>& info) {
  std::string name = info.param.id();
  std::replace_if(
      name.begin(), name.end(), [](char c) { return c == '/' || c == '.'; }, '_');
  return name;
}

}  // namespace attune::testing
