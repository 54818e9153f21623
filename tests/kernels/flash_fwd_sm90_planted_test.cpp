// Planted bugs in copies of flash_fwd_sm90 (made at configure time, see
// CMakeLists.txt), each caught by the emulator on a problem where the real
// kernel runs clean: a consumer that never releases its stage (the producer
// waits for ever), a consumer waiting with the previous lap's parity (it
// takes a phase that already passed and falls out of step with the ring),
// P rewritten while the P V GEMM that reads it is in flight; and in the
// dynamic tile scheduler, a tile handed out twice (two CTAs write its O)
// and the claimed tile written by a lane whose arrival does not carry it;
// the same hand-off in the varlen scheduler, and its numbering kernel's
// scan without a barrier; in the cluster scheduler, a consumer releasing
// its own block's stage only, and a producer leaving before its peer's last
// releases.
#include <gtest/gtest.h>

#include <bit>

#include "emulator/emulator.h"
#include "flash_fwd_sm90_cluster_no_tail.cuh"
#include "flash_fwd_sm90_cluster_own_release.cuh"
#include "flash_fwd_sm90_handoff_unordered.cuh"
#include "flash_fwd_sm90_no_release.cuh"
#include "flash_fwd_sm90_p_before_wait.cuh"
#include "flash_fwd_sm90_tile_twice.cuh"
#include "flash_fwd_sm90_varlen_handoff.cuh"
#include "flash_fwd_sm90_wrong_parity.cuh"
#include "runtime/launch/flash_fwd_sm90_params.h"
#include "sm90_varlen_scan_race.cuh"
#include "tests/support/emu_forward.h"
#include "tests/support/families.h"
#include "tests/support/tma_layout.h"

namespace attune {
namespace {

// d64, 128 rows on two consumers, 64-key tiles, 2 stages, the S GEMM of the
// next tile overlapped: 203 keys are 4 tiles, so every stage is refilled.
constexpr const char* kVariant = "flash_fwd_sm90/d64.bm128.bn64.st2.pp0.ov1.ra0.ts0.sc0";

struct PlantedRun {
  testing::Inputs in = testing::with_tma_strides(
      testing::make_inputs(testing::odd_length_families(DType::kBF16, 64, 64)[0]));  // 113 x 203, no mask
  std::vector<std::uint16_t> o = std::vector<std::uint16_t>(static_cast<std::size_t>(o_extent(in.problem)));
  std::vector<float> lse = std::vector<float>(static_cast<std::size_t>(lse_extent(in.problem)));
  Variant variant = parse_variant_id(kVariant);
  FlashFwdSm90Params params =
      flash_fwd_sm90_params(in.problem, buffers(), {}, variant, nullptr, encode_emulated_tensor_map);
  LaunchConfig config = flash_fwd_sm90_launch(params, variant, 132);

  AttentionBuffers buffers() { return {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}; }
  void describe(emu::Emulator& e) { testing::register_forward_buffers(e, in, o, lse); }
};

// The dynamic scheduler on 4 CTAs over 18 tiles (2 sequences, 3 heads, 3
// m-blocks of 128 causal rows), its counter zeroed before each launch.
struct SchedulerRun : PlantedRun {
  SchedulerRun() {
    in = testing::with_tma_strides(
        testing::make_inputs({"causal_b2_h3",
                              {2, 300, 3, 64},
                              {2, 260, 3, 64},
                              {2, 260, 3, 64},
                              ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}}));
    o.assign(static_cast<std::size_t>(o_extent(in.problem)), 0);
    lse.assign(static_cast<std::size_t>(lse_extent(in.problem)), 0.0F);
    variant = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp0.ov1.ra0.ts0.sc2");
    params = flash_fwd_sm90_params(in.problem, buffers(), {}, variant, &counter, encode_emulated_tensor_map);
    config = flash_fwd_sm90_launch(params, variant, 4);
  }
  void describe(emu::Emulator& e) {
    PlantedRun::describe(e);
    e.register_buffer("tile counter", &counter, sizeof(counter));
    counter = 0;
  }
  std::int32_t counter = 0;
};

// The varlen scheduler on 4 CTAs: sequences of 300 and 5 rows (3 and 1
// m-blocks of 128) over 3 heads, 12 tiles, numbered into the workspace by
// the real sm90_varlen_tiles before each launch.
struct VarlenRun : PlantedRun {
  VarlenRun() {
    testing::Family f{"packed_causal_h3",
                      {305, 3, 64},
                      {330, 3, 64},
                      {330, 3, 64},
                      ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
    f.options.cu_seqlens_q = {0, 300, 305};
    f.options.cu_seqlens_k = {0, 310, 330};
    in = testing::with_tma_strides(testing::make_inputs(f));
    o.assign(static_cast<std::size_t>(o_extent(in.problem)), 0);
    lse.assign(static_cast<std::size_t>(lse_extent(in.problem)), 0.0F);
    variant = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp0.ov1.ra0.ts0.sc3");
    workspace.assign(flash_fwd_sm90_workspace_bytes(variant, in.problem) / 4, 0);
    metadata = {in.problem.cu_seqlens_q.data(), in.problem.cu_seqlens_k.data(), nullptr, nullptr};
    params =
        flash_fwd_sm90_params(in.problem, buffers(), metadata, variant, workspace.data(), encode_emulated_tensor_map);
    config = flash_fwd_sm90_launch(params, variant, 4);
  }
  void describe(emu::Emulator& e) {
    PlantedRun::describe(e);
    e.register_buffer("scheduler workspace", workspace.data(), workspace.size() * 4);
    e.register_buffer("cu_seqlens_q", in.problem.cu_seqlens_q.data(), in.problem.cu_seqlens_q.size() * 4);
    e.register_buffer("cu_seqlens_k", in.problem.cu_seqlens_k.data(), in.problem.cu_seqlens_k.size() * 4);
    std::fill(workspace.begin(), workspace.end(), 0);
    e.launch(&sm90_varlen_tiles<256, Bf16>, sm90_varlen_tiles_launch(), sm90_varlen_tiles_params(params, variant));
  }
  std::vector<std::int32_t> workspace;
  DeviceMetadata metadata;
};

// The cluster scheduler pairing the 4 m-blocks of 512 unmasked rows over 2
// heads: 4 pairs on one 2 x 1 cluster (2 SMs), each block's producer
// multicasting half of every key tile into both blocks.
struct ClusterRun : PlantedRun {
  ClusterRun() {
    in = testing::with_tma_strides(testing::make_inputs({"noncausal_h2_512",
                                                         {1, 512, 2, 64},
                                                         {1, 333, 2, 64},
                                                         {1, 333, 2, 64},
                                                         ProblemOptions{.dtype = DType::kBF16}}));
    o.assign(static_cast<std::size_t>(o_extent(in.problem)), 0);
    lse.assign(static_cast<std::size_t>(lse_extent(in.problem)), 0.0F);
    variant = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp0.ov1.ra0.ts0.sc4");
    params = flash_fwd_sm90_params(in.problem, buffers(), {}, variant, nullptr, encode_emulated_tensor_map);
    config = flash_fwd_sm90_launch(params, variant, 2);
  }
};

// The mutant's reports: at least one of `kinds`, first at a line of its copy.
template <class Run, class Kernel, class Params>
void expect_caught(Run& run, Kernel kernel, const Params& params, std::initializer_list<emu::BugKind> kinds,
                   const char* file) {
  emu::Emulator emulator;
  run.describe(emulator);
  try {
    emulator.launch(kernel, run.config, params);
    FAIL() << file << ": the planted bug was not reported";
  } catch (const emu::KernelFault& fault) {
    const std::string what = fault.what();
    bool any = false;
    for (emu::BugKind kind : kinds) any = any || fault.has(kind);
    EXPECT_TRUE(any) << what;
    EXPECT_FALSE(fault.has(emu::BugKind::kGlobalOutOfBounds)) << what;
    EXPECT_NE(what.find(file), std::string::npos) << what;
  }
}

TEST(FlashFwdSm90PlantedTest, TheRealKernelRunsClean) {
  PlantedRun run;
  emu::Emulator emulator;
  run.describe(emulator);
  EXPECT_NO_THROW(emulator.launch(&flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 0, Bf16>, run.config, run.params));
}

TEST(FlashFwdSm90PlantedTest, TheDynamicSchedulerRunsClean) {
  SchedulerRun run;
  ASSERT_EQ(run.config.grid.x, 4);
  ASSERT_EQ(run.params.tiles.count(), 18);
  emu::Emulator emulator;
  run.describe(emulator);
  EXPECT_NO_THROW(emulator.launch(&flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 2, Bf16>, run.config, run.params));
  EXPECT_EQ(run.counter, 18 - 4 + 4);  // every CTA claims once past the last tile
}

TEST(FlashFwdSm90PlantedTest, ATileHandedOutTwiceIsAGlobalRace) {
  SchedulerRun run;
  expect_caught(run, &sm90_tile_twice::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 2, Bf16>,
                std::bit_cast<sm90_tile_twice::FlashFwdSm90Params>(run.params), {emu::BugKind::kGlobalRace},
                "flash_fwd_sm90_tile_twice.cuh");
}

TEST(FlashFwdSm90PlantedTest, AHandOffWithoutItsBarrierIsASharedRace) {
  SchedulerRun run;
  expect_caught(run, &sm90_handoff_unordered::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 2, Bf16>,
                std::bit_cast<sm90_handoff_unordered::FlashFwdSm90Params>(run.params), {emu::BugKind::kSharedRace},
                "flash_fwd_sm90_handoff_unordered.cuh");
}

TEST(FlashFwdSm90PlantedTest, TheVarlenSchedulerRunsClean) {
  VarlenRun run;
  ASSERT_EQ(run.config.grid.x, 4);
  emu::Emulator emulator;
  run.describe(emulator);
  EXPECT_EQ(run.workspace[4 + 2 + 2], 12);  // tile_start[2], after the counter and slot_batch: 12 tiles, none empty
  EXPECT_NO_THROW(emulator.launch(&flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 3, Bf16>, run.config, run.params));
  EXPECT_EQ(run.workspace[0], 12 - 4 + 4);  // every CTA claims once past the last tile
}

TEST(FlashFwdSm90PlantedTest, AVarlenHandOffWithoutItsBarrierIsASharedRace) {
  VarlenRun run;
  expect_caught(run, &sm90_varlen_handoff::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 3, Bf16>,
                std::bit_cast<sm90_varlen_handoff::FlashFwdSm90Params>(run.params), {emu::BugKind::kSharedRace},
                "flash_fwd_sm90_varlen_handoff.cuh");
}

TEST(FlashFwdSm90PlantedTest, TheVarlenNumberingsScanWithoutABarrierIsASharedRace) {
  VarlenRun run;
  run.config = sm90_varlen_tiles_launch();
  expect_caught(
      run, &sm90_varlen_scan_race::sm90_varlen_tiles<256, Bf16>,
      std::bit_cast<sm90_varlen_scan_race::Sm90VarlenTilesParams>(sm90_varlen_tiles_params(run.params, run.variant)),
      {emu::BugKind::kSharedRace}, "sm90_varlen_scan_race.cuh");
}

TEST(FlashFwdSm90PlantedTest, TheClusterSchedulerRunsClean) {
  ClusterRun run;
  ASSERT_EQ(run.params.cluster_pairs, 1);
  ASSERT_EQ(run.config.grid.x, 2);
  emu::Emulator emulator;
  run.describe(emulator);
  EXPECT_NO_THROW(emulator.launch(&flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 4, Bf16>, run.config, run.params));
}

// Each consumer releases its own block's stage twice instead of both
// blocks' once: a producer multicasts into its peer's stage while the
// peer's consumers may still read it.
TEST(FlashFwdSm90PlantedTest, AClusterReleaseOfOneBlockOnlyIsAnAsyncRace) {
  ClusterRun run;
  expect_caught(run, &sm90_cluster_own_release::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 4, Bf16>,
                std::bit_cast<sm90_cluster_own_release::FlashFwdSm90Params>(run.params),
                {emu::BugKind::kAsyncProxyOrder}, "flash_fwd_sm90_cluster_own_release.cuh");
}

// A producer that leaves without waiting for its stages' last releases: its
// block may exit while the peer's consumers still arrive in it.
TEST(FlashFwdSm90PlantedTest, AClusterBlockThatExitsBeforeItsPeersLastReleaseIsReported) {
  ClusterRun run;
  expect_caught(run, &sm90_cluster_no_tail::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 4, Bf16>,
                std::bit_cast<sm90_cluster_no_tail::FlashFwdSm90Params>(run.params), {emu::BugKind::kMbarrierMisuse},
                "flash_fwd_sm90_cluster_no_tail.cuh");
}

TEST(FlashFwdSm90PlantedTest, MissingConsumerReleaseDeadlocks) {
  PlantedRun run;
  expect_caught(run, &sm90_no_release::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 0, Bf16>,
                std::bit_cast<sm90_no_release::FlashFwdSm90Params>(run.params), {emu::BugKind::kDeadlock},
                "flash_fwd_sm90_no_release.cuh");
}

TEST(FlashFwdSm90PlantedTest, WrongParityReadsAStageBeforeItLands) {
  PlantedRun run;
  expect_caught(run, &sm90_wrong_parity::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 0, Bf16>,
                std::bit_cast<sm90_wrong_parity::FlashFwdSm90Params>(run.params),
                // Read before the stage's phase (proxy order), or, where the loads
                // landed while the consumers waited for Q, a consumer one phase
                // behind that waits for ever at the planted line.
                {emu::BugKind::kAsyncProxyOrder, emu::BugKind::kTmaMisuse, emu::BugKind::kDeadlock},
                "flash_fwd_sm90_wrong_parity.cuh");
}

TEST(FlashFwdSm90PlantedTest, PRewrittenBeforeItsGemmIsWaitedFor) {
  PlantedRun run;
  expect_caught(run, &sm90_p_before_wait::flash_fwd_sm90<64, 128, 64, 2, 0, 1, 0, 0, 0, Bf16>,
                std::bit_cast<sm90_p_before_wait::FlashFwdSm90Params>(run.params),
                {emu::BugKind::kWgmmaOperandInFlight}, "flash_fwd_sm90_p_before_wait.cuh");
}

}  // namespace
}  // namespace attune
