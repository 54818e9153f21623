// The Hopper forward family compiled with NVRTC for sm_90a: the covering
// set of its variants (every value of every tunable at least once, the two
// dtypes alternating) and the heuristic's choice of each head-dim bucket
// compile without spills and without a ptxas C75xx warning (wgmma
// serialized: compile_with_nvrtc refuses those), and their SASS holds the
// machinery the family is about: HGMMA and UTMALDG (multicast in the cluster
// scheduler's variants, and only there). ATTUNE_SM90_SWEEP=all
// compiles every enumerated variant of every bucket (about half an hour on
// two cores; docs/kernels.md has the last count). The e4m3 forward's
// covering set compiles to QGMMA the same way. The Hopper backward
// (flash_bwd_sm90): every variant and the heuristic's, deterministic and
// not, compile without spills to HGMMA and UTMALDG.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "generated/kernel_shapes.h"
#include "profile/sass.h"
#include "runtime/dispatch/heuristics.h"
#include "templates/sm90_scheduler.cuh"
#include "tests/support/covering_set.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

const KernelSpec& sm90() { return *find_kernel_spec("flash_fwd_sm90"); }

std::vector<Variant> sweep_set() {
  const ArchLimits arch = require_arch("sm_90a");
  const char* all = std::getenv("ATTUNE_SM90_SWEEP");
  if (all != nullptr && std::string(all) == "all") return testing::family_variants(sm90(), arch);
  std::vector<Variant> set = testing::covering_set_of(sm90(), arch);
  for (int d : sm90().tunables.front().values) {
    const Variant h = heuristic_variant("fwd", DType::kBF16, d, d, arch);
    if (std::find(set.begin(), set.end(), h) == set.end()) set.push_back(h);
  }
  return set;
}

// A variant's compile checked (it compiled, nothing spilled) and its SASS
// mix; nullopt, with why in `no_sass`, where no disassembler runs here.
std::optional<profile::SassMix> sass_without_spills(const Variant& v, const CompileResult& r, std::string* no_sass) {
  EXPECT_TRUE(r.ok) << v.id() << ":\n" << r.log;
  EXPECT_FALSE(r.spills()) << v.id() << ": " << r.spill_bytes << " bytes spilled\n" << r.log;
  if (!r.ok) return std::nullopt;
  try {
    return profile::count_sass(profile::disassemble(r.cubin));
  } catch (const Error& e) {
    *no_sass = e.what();
    return std::nullopt;
  }
}

TEST(FlashFwdSm90NvrtcTest, CompilesWithoutSpillsToWgmmaAndTma) {
  const std::vector<Variant> set = sweep_set();
  const std::vector<CompileResult> results = testing::compile_all(
      set, [](std::size_t i) { return i % 2 == 0 ? DType::kBF16 : DType::kF16; }, "sm_90a", "flash_fwd_sm90.cu");
  std::string no_sass;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const CompileResult& r = results[i];
    EXPECT_GT(r.registers, 0) << set[i].id();
    const std::optional<profile::SassMix> compiled = sass_without_spills(set[i], r, &no_sass);
    if (!compiled) continue;
    profile::SassMix mix = *compiled;
    EXPECT_GT(mix["HGMMA"], 0) << set[i].id();
    EXPECT_GT(mix["UTMALDG"], 0) << set[i].id();
    // The cluster scheduler multicasts K and V (sm90_sched::kCluster); no other does.
    const bool cluster = FlashFwdSm90Shape::of(set[i]).scheduler == sm90_sched::kCluster;
    EXPECT_EQ(mix["UTMALDG.MULTICAST"] > 0, cluster) << set[i].id();
    std::cout << set[i].id() << ": " << r.registers << " registers, HGMMA " << mix["HGMMA"] << ", UTMALDG "
              << mix["UTMALDG"] << " (multicast " << mix["UTMALDG.MULTICAST"] << "), UTMASTG " << mix["UTMASTG"] << ", "
              << r.seconds << " s\n";
  }
  ::testing::Test::RecordProperty("variants", static_cast<int>(set.size()));
  if (!no_sass.empty()) GTEST_SKIP() << "compiled without spills; SASS not checked: " << no_sass;
}

// The e4m3 forward (the fp8 feature): a covering set of the d128 and d256
// buckets and the heuristic's choice of each (causal and not) compile
// without spills to 8-bit wgmma only (QGMMA, no HGMMA) fed by TMA.
std::vector<Variant> fp8_set() {
  const ArchLimits arch = require_arch("sm_90a");
  std::vector<Variant> set;
  for (int d : {128, 256}) {
    for (Variant v : testing::covering_set_of(sm90(), arch, d)) set.push_back(v);
    for (bool masked : {false, true}) {
      const Variant h = heuristic_variant("fwd", DType::kBF16, d, d, arch, kFeatureFp8, {.masked = masked});
      if (std::find(set.begin(), set.end(), h) == set.end()) set.push_back(h);
    }
  }
  for (Variant& v : set) v.modifiers = kFeatureFp8;
  return set;
}

TEST(FlashFwdSm90NvrtcTest, E4m3VariantsCompileWithoutSpillsToQgmma) {
  const std::vector<Variant> set = fp8_set();
  const std::vector<CompileResult> results = testing::compile_all(
      set, [](std::size_t) { return DType::kBF16; }, "sm_90a", "flash_fwd_sm90.cu");
  std::string no_sass;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const CompileResult& r = results[i];
    const std::optional<profile::SassMix> compiled = sass_without_spills(set[i], r, &no_sass);
    if (!compiled) continue;
    profile::SassMix mix = *compiled;
    EXPECT_GT(mix["QGMMA"], 0) << set[i].id();
    EXPECT_EQ(mix["HGMMA"], 0) << set[i].id();
    EXPECT_GT(mix["UTMALDG"], 0) << set[i].id();
    std::cout << set[i].id() << ": " << r.registers << " registers, QGMMA " << mix["QGMMA"] << ", " << r.seconds
              << " s\n";
  }
  if (!no_sass.empty()) GTEST_SKIP() << "compiled without spills; SASS not checked: " << no_sass;
}

TEST(FlashBwdSm90NvrtcTest, CompilesWithoutSpillsToWgmmaAndTma) {
  const ArchLimits arch = require_arch("sm_90a");
  const std::vector<Variant> set = testing::family_variants(*find_kernel_spec("flash_bwd_sm90"), arch);
  for (int d : {64, 128}) {
    for (bool deterministic : {false, true}) {
      const Variant h = heuristic_backward_variant(DType::kBF16, d, d, arch, deterministic);
      EXPECT_NE(std::find(set.begin(), set.end(), h), set.end()) << h.id() << ": the heuristic's, not listed";
    }
  }
  const std::vector<CompileResult> results = testing::compile_all(
      set, [](std::size_t i) { return i % 2 == 0 ? DType::kBF16 : DType::kF16; }, "sm_90a", "flash_bwd_sm90.cu");
  std::string no_sass;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const CompileResult& r = results[i];
    const std::optional<profile::SassMix> compiled = sass_without_spills(set[i], r, &no_sass);
    if (!compiled) continue;
    profile::SassMix mix = *compiled;
    EXPECT_GT(mix["HGMMA"], 0) << set[i].id();
    EXPECT_GT(mix["UTMALDG"], 0) << set[i].id();
    std::cout << set[i].id() << ": " << r.registers << " registers, HGMMA " << mix["HGMMA"] << ", UTMALDG "
              << mix["UTMALDG"] << ", " << r.seconds << " s\n";
  }
  if (!no_sass.empty()) GTEST_SKIP() << "compiled without spills; SASS not checked: " << no_sass;
}

}  // namespace
}  // namespace attune
