// The kernels' main loops are free of shared-memory bank conflicts: for every
// variant of the emulator covering sets (forward, decode, backward), the
// shared wavefronts one key tile costs (the difference of two emulated runs,
// so the prologue and epilogue cancel) are within 1.05 of their ideal. The
// check can fail: a kept copy of the kernels with the unswizzled layout (rows
// one after another, made at configure time) is reported at 4x or more.
#include <gtest/gtest.h>

#include "profile/profile.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_fwd_params.h"
#include "tests/kernels/unswizzled_run.h"
#include "tests/support/covering_set.h"

namespace attune {
namespace {

class SharedTrafficTest : public ::testing::TestWithParam<Variant> {};

TEST_P(SharedTrafficTest, TheMainLoopIsWithinFivePercentOfTheIdeal) {
  const Variant& v = GetParam();
  const profile::PerKeyTile t = profile::emulate_per_key_tile(v, DType::kBF16);
  ASSERT_GT(t.smem_wavefronts_ideal, 0) << v.id();
  const double ratio = t.smem_wavefronts / t.smem_wavefronts_ideal;
  std::string worst;
  for (const emu::SiteTraffic& s : t.worst_sites) {
    worst += "\n  " + s.site + ": " + std::to_string(s.wavefronts) + " for " + std::to_string(s.ideal);
  }
  EXPECT_LE(ratio, 1.05) << v.id() << ": " << t.smem_wavefronts << " wavefronts per tile for an ideal of "
                         << t.smem_wavefronts_ideal << worst;
  RecordProperty("ratio", std::to_string(ratio));
}

std::vector<Variant> all_covering_sets() {
  const ArchLimits arch = require_arch("sm_90a");
  std::vector<Variant> all;
  for (const char* op : {"fwd", "decode", "bwd"}) {
    for (Variant& v : testing::covering_set(arch, op)) all.push_back(std::move(v));
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(CoveringSets, SharedTrafficTest, ::testing::ValuesIn(all_covering_sets()),
                         testing::variant_test_name);

// The unswizzled copy of flash_fwd, run on the heuristic d128 variant's tile
// shape with 2 and 4 key tiles.
emu::LaunchCounters run_unswizzled(int tiles) {
  return testing::run_unswizzled<128, 64, 32, 4, 1, 2, 1, Bf16>(
      parse_variant_id("flash_fwd/d128.bm64.bn32.wm4.wn1.st2.qr1"), DType::kBF16, tiles);
}

TEST(SharedTrafficPlantedTest, TheUnswizzledLayoutIsReportedAtFourTimesTheIdealOrMore) {
  const emu::LaunchCounters tile = run_unswizzled(4).minus(run_unswizzled(2));
  const double ratio = tile.ratio();
  EXPECT_GE(ratio, 4.0) << tile.shared_wavefronts << " / " << tile.shared_ideal;
  // The worst line is an ldmatrix of the tile loop.
  const std::vector<emu::SiteTraffic> worst = tile.worst(1);
  ASSERT_FALSE(worst.empty());
  EXPECT_NE(worst[0].site.find("unswizzled.cuh"), std::string::npos) << worst[0].site;
  std::cout << "unswizzled d128.bm64.bn32.wm4: " << ratio << "x the ideal per key tile; worst " << worst[0].site
            << "\n";
}

// What the layout is worth in the speed model: the heuristic d128 forward
// variant's bound on sm_90a at least doubles against the same kernel on the
// unswizzled layout (the goal; numbers in docs/perf/layouts.md).
TEST(SharedTrafficPlantedTest, TheSwizzledLayoutAtLeastDoublesTheBoundOfTheHeuristicD128Forward) {
  const profile::ArchRates rates = profile::arch_rates("sm_90a");
  const Variant heuristic =
      heuristic_variant("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"), 0, {.portable_only = true});
  ASSERT_EQ(heuristic.id(), "flash_fwd/d128.bm64.bn32.wm4.wn1.st2.qr1");  // the shape run_unswizzled runs
  const profile::Bound after =
      profile::bound_of(profile::emulate_per_key_tile(heuristic, DType::kBF16), rates, rates.sm_count, rates.clock_ghz);
  const profile::PerKeyTile planted =
      profile::tile_costs(run_unswizzled(4).minus(run_unswizzled(2)), 2, {64, 32, 128, /*backward=*/false});
  const profile::Bound before = profile::bound_of(planted, rates, rates.sm_count, rates.clock_ghz);
  std::cout << "bound on sm_90a: unswizzled " << before.tflops << " TFLOP/s (" << before.limiter << "), swizzled "
            << after.tflops << " TFLOP/s (" << after.limiter << ")\n";
  EXPECT_GE(after.tflops, 2.0 * before.tflops);
  EXPECT_EQ(before.limiter, "shared");
}

}  // namespace
}  // namespace attune
