// The Hopper forward family (flash_fwd_sm90) on the emulator against the
// fp64 reference with the forward's accuracy rule: a covering set (every
// value of every tunable at least once) over the seed families and
// FlashAttention's odd shapes, re-laid so TMA can map them; every detector
// (TMA, mbarriers, wgmma operands, async-proxy order, races) silent. Then
// what the runtime adds: calls TMA cannot map fall back to flash_fwd, the
// tensor maps of a repeated call are not encoded again, and the heuristic
// picks the family on sm_90a only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "emulator/emulator.h"
#include "generated/kernel_shapes.h"
#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_fwd_sm90_params.h"
#include "runtime/launch/ops.h"
#include "tests/support/covering_set.h"
#include "tests/support/emu_forward.h"
#include "tests/support/tma_layout.h"

namespace attune {

namespace {

// Two emulated SMs: the persistent schedulers run several tiles per CTA on
// every problem of this file (each test is its own process).
const bool kTwoSms = [] {
  setenv("ATTUNE_EMU_SMS", "2", 1);
  return true;
}();

const KernelSpec& sm90() { return *find_kernel_spec("flash_fwd_sm90"); }

void check_families(const Variant& variant, const std::vector<testing::Family>& families) {
  for (const testing::Family& family : families) {
    const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(family));
    ASSERT_EQ(sm90_unfit_reason(in.problem), "") << family.name;  // the kernel itself runs, not the fallback
    testing::expect_forward_matches_reference(variant, in, family.name);
  }
}

std::vector<Variant> covering_set() { return testing::covering_set_of(sm90(), require_arch("sm_90a")); }

TEST(FlashFwdSm90EmuTest, CoveringSetCoversEveryTunableValue) {
  testing::expect_covers_every_tunable_value(covering_set(), sm90());
}

class Sm90CoveringSetTest : public ::testing::TestWithParam<Variant> {};

TEST_P(Sm90CoveringSetTest, MatchesReferenceOnSeedAndOddLengthFamilies) {
  testing::check_covering_families(covering_set(), GetParam(), check_families);
}

INSTANTIATE_TEST_SUITE_P(Variants, Sm90CoveringSetTest, ::testing::ValuesIn(covering_set()),
                         testing::variant_test_name);

// The family's heuristic choice of each head-dim bucket (what the dispatcher
// runs on an H100/H200), on a long causal and a packed problem.
TEST(FlashFwdSm90EmuTest, HeuristicChoicesMatchReference) {
  const ArchLimits arch = require_arch("sm_90a");
  for (const int d : {64, 128, 256}) {
    const Variant v = heuristic_variant("fwd", DType::kBF16, d, d, arch, 0, {.masked = true});
    ASSERT_EQ(v.kernel, &sm90()) << v.id();
    testing::Family causal{"causal_300x517",
                           {1, 300, 2, d},
                           {1, 517, 1, d},
                           {1, 517, 1, d},
                           ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
    check_families(v, {causal});
  }
}

// Q, K or V off 16-byte alignment (or rows TMA cannot step) runs on
// flash_fwd, loaded when first needed, with the same result.
TEST(FlashFwdSm90EmuTest, CallsTmaCannotMapFallBackToFlashFwd) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc0");
  const testing::Inputs contiguous =
      testing::make_inputs(testing::seed_families(DType::kBF16)[1]);  // d 5: rows 5 apart
  EXPECT_NE(sm90_unfit_reason(contiguous.problem), "");
  testing::expect_forward_matches_reference(v, contiguous, "square_causal, contiguous");
}

// The kernel takes the row maximum on unscaled scores (the scale folded
// into the exponent): a scale <= 0 is declined with its value and runs on
// flash_fwd, with the same result.
TEST(FlashFwdSm90EmuTest, ANonPositiveScaleFallsBackToFlashFwd) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc0");
  testing::Inputs in = testing::with_tma_strides(testing::make_inputs(testing::seed_families(DType::kBF16)[0]));
  EXPECT_EQ(sm90_unfit_reason(in.problem), "");
  in.problem.scale = -0.25;
  EXPECT_NE(sm90_unfit_reason(in.problem).find("softmax scale -0.25"), std::string::npos)
      << sm90_unfit_reason(in.problem);
  testing::expect_forward_matches_reference(v, in, "negative scale");
}

// The tensor maps of a call are built from its pointers and strides each
// call, and encoded once: the same call again encodes none.
TEST(FlashFwdSm90EmuTest, RepeatedCallEncodesNoTensorMap) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm64.bn64.st2.pp0.ov0.ra0.ts1.sc0");
  const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(testing::seed_families(DType::kBF16)[0]));
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  const AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()};
  EmuBackend backend;
  const ForwardKernels kernels = load_forward(backend, v, p.dtype);
  const auto call_once = [&] {
    CallMemory memory(backend, p, 0, nullptr);
    launch_forward(*backend.begin(nullptr), p, kernels, buffers, memory.metadata(), nullptr);
    memory.finish();
  };
  call_once();
  const std::size_t first = backend.tensor_maps().encodes();
  EXPECT_EQ(first, 3U);  // Q, K, V; O is contiguous with 3 columns: it leaves by direct stores
  call_once();
  EXPECT_EQ(backend.tensor_maps().encodes(), first);
}

// Every tile is numbered once; within an L2 section the heaviest m-block
// (the last) comes first, over the section's (batch, head) pairs.
TEST(FlashFwdSm90EmuTest, TileOrderNumbersEveryTileOnceHeaviestFirst) {
  for (const sm90_sched::TileOrder order : {sm90_sched::TileOrder{3, 4, 2, 3}, sm90_sched::TileOrder{5, 2, 1, 1},
                                            sm90_sched::TileOrder{1, 7, 3, 21}, sm90_sched::TileOrder{4, 3, 3, 2}}) {
    std::set<std::tuple<int, int, int>> seen;
    for (i32 i = 0; i < order.count(); ++i) {
      const sm90_sched::WorkTile t = order.at(i);
      ASSERT_GE(t.m_block, 0);
      ASSERT_LT(t.m_block, order.m_blocks);
      ASSERT_LT(t.head, order.heads);
      ASSERT_LT(t.batch, order.batches);
      EXPECT_TRUE(seen.insert({t.m_block, t.head, t.batch}).second) << "tile " << i << " repeats";
      const i32 pair = t.batch * order.heads + t.head;
      const i32 section = pair / order.section_heads;
      const i32 first = section * order.section_heads * order.m_blocks;  // the section's first number
      EXPECT_GE(i, first);
      if (i == first) {
        EXPECT_EQ(t.m_block, order.m_blocks - 1) << "a section starts with its heaviest m-block";
      }
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(order.count()));
  }
}

// Each scheduler over more tiles than the two emulated SMs: causal, a
// sliding window, packed varlen (sequences shorter than the longest leave
// empty tiles, except under the varlen scheduler) and GQA, against the
// fp64 reference.
TEST(FlashFwdSm90EmuTest, EverySchedulerRunsMoreTilesThanCtas) {
  ASSERT_EQ(emulated_sm_count(), 2);
  std::vector<testing::Family> families;
  for (const testing::Family& f : testing::seed_families(DType::kBF16)) {
    if (f.name.find("packed") != std::string::npos) families.push_back(f);
  }
  families.push_back({"gqa_causal_b2",
                      {2, 200, 4, 64},
                      {2, 333, 2, 64},
                      {2, 333, 2, 64},
                      ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}});
  // Sequences of 3, 1, 0 and 2 m-blocks: 12 tiles, none empty, by the varlen scheduler.
  testing::Family long_short{"packed_long_short_causal",
                             {445, 2, 64},
                             {500, 1, 64},
                             {500, 1, 64},
                             ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
  long_short.options.cu_seqlens_q = {0, 300, 305, 305, 445};
  long_short.options.cu_seqlens_k = {0, 310, 330, 340, 500};
  families.push_back(long_short);
  for (const int scheduler :
       {sm90_sched::kGrid, sm90_sched::kStatic, sm90_sched::kDynamic, sm90_sched::kVarlen, sm90_sched::kCluster}) {
    const Variant v =
        parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc" + std::to_string(scheduler));
    SCOPED_TRACE(v.id());
    check_families(v, families);
  }
}

TEST(FlashFwdSm90EmuTest, TheDynamicSchedulerNeedsItsCounter) {
  const Variant dynamic = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc2");
  const Variant fixed = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc1");
  const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(testing::seed_families(DType::kBF16)[0]));
  EXPECT_EQ(flash_fwd_sm90_workspace_bytes(dynamic, in.problem), 16U);
  EXPECT_EQ(flash_fwd_sm90_workspace_bytes(fixed, in.problem), 0U);
  // The varlen scheduler's counter, B + (B + 1) int32 (to 8 bytes), then
  // 8 bytes a tile: 5 sequences of up to 300 rows, 3 m-blocks, 2 heads.
  const Variant varlen = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc3");
  AttentionProblem five = in.problem;
  five.batch = 5;
  five.seqlen_q = 300;
  five.heads_q = 2;
  EXPECT_EQ(flash_fwd_sm90_workspace_bytes(varlen, five), 64U + 8U * 30U);
  const AttentionBuffers b{in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr};
  try {
    static_cast<void>(flash_fwd_sm90_params_without_maps(in.problem, b, {}, dynamic, nullptr));
    FAIL() << "a dynamic variant's params were made without a counter";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("counter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(static_cast<void>(flash_fwd_sm90_params_without_maps(in.problem, b, {}, varlen, nullptr)),
               InvalidArgument);
  // Persistent grids: at most one CTA per SM; the grid scheduler one per tile.
  FlashFwdSm90Params params{};
  params.tiles = flash_fwd_sm90_tiles(in.problem, dynamic);
  const i32 tiles = params.tiles.count();
  EXPECT_EQ(flash_fwd_sm90_launch(params, dynamic, 2).grid.x, std::min(tiles, 2));
  const Variant grid = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc0");
  EXPECT_EQ(flash_fwd_sm90_launch(params, grid, 2).grid.x, tiles);
  EXPECT_EQ(volume(flash_fwd_sm90_launch(params, grid, 2).cluster), 1);
}

// kCluster pairs the m-blocks of a call where two adjacent ones see the same
// keys, all in the tensor: no mask, fixed lengths, an even m-block count.
// Each block of a pair loads half of every K and V tile into both (its
// maps' boxes are half a key tile); elsewhere its blocks run alone. Both
// match the fp64 reference, with more tiles than clusters, and an odd
// block out with no tile.
TEST(FlashFwdSm90EmuTest, TheClusterSchedulerPairsMBlocksWhereTheCallAllows) {
  ASSERT_EQ(emulated_sm_count(), 2);
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc4");
  const testing::Family paired{
      "noncausal_b2_h2_512", {2, 512, 2, 64}, {2, 333, 2, 64}, {2, 333, 2, 64}, ProblemOptions{.dtype = DType::kBF16}};
  const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(paired));
  ASSERT_TRUE(flash_fwd_sm90_pairs(in.problem, v));
  const AttentionBuffers b{in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr};
  const FlashFwdSm90Params params = flash_fwd_sm90_params_without_maps(in.problem, b, {}, v, nullptr);
  EXPECT_EQ(params.cluster_pairs, 1);
  EXPECT_EQ(params.tiles.count(), 2 * 2 * 2);  // pairs of the 4 m-blocks, over 2 heads and 2 sequences
  const LaunchConfig config = flash_fwd_sm90_launch(params, v, 2);
  EXPECT_EQ(config.grid.x, 2);  // one cluster on two SMs
  EXPECT_EQ(config.cluster.x, 2);
  EXPECT_EQ(flash_fwd_sm90_maps(in.problem, b, v).k.box[1], 32U);
  EXPECT_EQ(flash_fwd_sm90_launch(params, v, 132).grid.x, 2 * 8);

  testing::Family causal = paired;
  causal.name = "causal_b2_h2_512";
  causal.options.mask = Mask::causal_bottom_right();
  testing::Family odd{
      "noncausal_b1_h1_300", {1, 300, 1, 64}, {1, 200, 1, 64}, {1, 200, 1, 64}, ProblemOptions{.dtype = DType::kBF16}};
  testing::Family one{"causal_b1_h1_100",
                      {1, 100, 1, 64},
                      {1, 200, 1, 64},
                      {1, 200, 1, 64},
                      ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
  for (const testing::Family& f : {causal, odd, one}) {
    EXPECT_FALSE(flash_fwd_sm90_pairs(testing::with_tma_strides(testing::make_inputs(f)).problem, v)) << f.name;
  }
  SCOPED_TRACE(v.id());
  check_families(v, {paired, causal, odd, one});
}

// sm90_varlen_tiles on its own: what it writes for a packed batch.
struct VarlenTilesRun {
  std::vector<std::int32_t> cu_q, cu_k, slot_batch, tile_start;
  std::vector<u64> tiles;
  Sm90VarlenTilesParams params{};

  VarlenTilesRun(std::vector<std::int32_t> q, std::vector<std::int32_t> k, i32 heads, i32 block_m, MaskParams mask,
                 i32 capacity = 4096)
      : cu_q(std::move(q)), cu_k(std::move(k)) {
    const auto batches = static_cast<i32>(cu_q.size() - 1);
    slot_batch.assign(static_cast<std::size_t>(batches), -1);
    tile_start.assign(static_cast<std::size_t>(batches + 1), -1);
    tiles.assign(static_cast<std::size_t>(capacity), ~u64{0});
    params = {.seqs = {cu_q.data(), cu_k.empty() ? nullptr : cu_k.data(), nullptr, 0, 0},
              .mask = mask,
              .batches = batches,
              .heads = heads,
              .section_heads = heads,
              .block_m = block_m,
              .out = {slot_batch.data(), tile_start.data(), tiles.data(), capacity}};
  }
  void run() {
    emu::Emulator emulator;
    emulator.register_buffer("cu_seqlens_q", cu_q.data(), cu_q.size() * 4);
    if (!cu_k.empty()) emulator.register_buffer("cu_seqlens_k", cu_k.data(), cu_k.size() * 4);
    emulator.register_buffer("slot_batch", slot_batch.data(), slot_batch.size() * 4);
    emulator.register_buffer("tile_start", tile_start.data(), tile_start.size() * 4);
    emulator.register_buffer("tiles", tiles.data(), tiles.size() * 8);
    emulator.launch(&sm90_varlen_tiles<256, Bf16>, sm90_varlen_tiles_launch(), params);
  }
  // The first `count` tiles as the forward's producer reads them (one warp).
  std::vector<sm90_sched::WorkTile> read(i32 count) {
    std::vector<sm90_sched::WorkTile> out(static_cast<std::size_t>(count));
    emu::Emulator emulator;
    emulator.register_buffer("tiles", tiles.data(), tiles.size() * 8);
    emulator.launch({.grid = {1, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 0}, [&] {
      for (i32 i = dev::lane_id(); i < count; i += kWarpSize) {
        out[static_cast<std::size_t>(i)] = sm90_sched::varlen_tile(params.out, params.heads, i);
      }
    });
    return out;
  }
};

// Only tiles that exist are numbered (m-blocks x heads per sequence, none
// for an empty one), sequences by the keys their heaviest m-block sees,
// ties by index, each sequence's heaviest m-block first.
TEST(FlashFwdSm90EmuTest, TheVarlenSchedulerNumbersTilesThatExistLongestFirst) {
  // Queries 5, 300, 0, 129, 64 rows; keys 700, 300, 50, 129, 700.
  VarlenTilesRun run({0, 5, 305, 305, 434, 498}, {0, 700, 1000, 1050, 1179, 1879}, 3, 128, MaskParams{});
  run.run();
  EXPECT_EQ(run.slot_batch, (std::vector<std::int32_t>{0, 4, 1, 3, 2}));
  // m-blocks 1, 1, 3, 2, 0 in slot order, times 3 heads.
  EXPECT_EQ(run.tile_start, (std::vector<std::int32_t>{0, 3, 6, 15, 21, 21}));
  std::set<std::tuple<int, int, int>> seen;
  const std::vector<sm90_sched::WorkTile> read = run.read(21);
  for (i32 index = 0; index < 21; ++index) {
    const sm90_sched::WorkTile t = read[static_cast<std::size_t>(index)];
    seen.insert({t.batch, t.m_block, t.head});
    const std::size_t slot = index < 3 ? 0 : index < 6 ? 1 : index < 15 ? 2 : 3;
    EXPECT_EQ(t.batch, run.slot_batch[slot]) << "tile " << index;
    const i32 m_blocks = (run.tile_start[slot + 1] - run.tile_start[slot]) / 3;
    EXPECT_EQ(t.m_block, m_blocks - 1 - (index - run.tile_start[slot]) / 3) << "heaviest m-block first";
  }
  EXPECT_EQ(seen.size(), 21U);        // each (sequence, m-block, head) once
  EXPECT_EQ(run.tiles[21], ~u64{0});  // nothing past the count
  // Causal (bottom-right): the last m-block of sequence 1 sees all 300
  // keys, of sequence 0 all 700, of 3 129, of 4 700; the empty one none.
  VarlenTilesRun causal({0, 5, 305, 305, 434, 498}, {0, 700, 1000, 1050, 1179, 1879}, 1, 64,
                        MaskParams{.left = -1, .right = 0, .top_left = 0});
  causal.run();
  EXPECT_EQ(causal.slot_batch, (std::vector<std::int32_t>{0, 4, 1, 3, 2}));
  EXPECT_EQ(causal.tile_start, (std::vector<std::int32_t>{0, 1, 2, 7, 10, 10}));
  // Lengths past the workspace's bound (cu_seqlens beyond what the plan
  // was told) are cut to its capacity, never written past it.
  VarlenTilesRun small({0, 5, 305, 305, 434, 498}, {0, 700, 1000, 1050, 1179, 1879}, 3, 128, MaskParams{}, 8);
  small.run();
  EXPECT_EQ(small.tile_start, (std::vector<std::int32_t>{0, 3, 6, 8, 8, 8}));
}

// Past kSortedBatches sequences the order is the batch order; the numbers
// stay exact.
TEST(FlashFwdSm90EmuTest, TheVarlenSchedulerKeepsTheBatchOrderPastItsSortLimit) {
  const i32 batches = kSortedBatches + 3;
  std::vector<std::int32_t> cu_q{0};
  for (i32 b = 0; b < batches; ++b) cu_q.push_back(cu_q.back() + (b % 5) * 70);  // 0 to 280 rows
  VarlenTilesRun run(cu_q, {}, 2, 128, MaskParams{}, 6 * batches);
  run.params.seqs.seqlen_k = 64;
  run.run();
  std::int32_t start = 0;
  for (i32 s = 0; s < batches; ++s) {
    ASSERT_EQ(run.slot_batch[static_cast<std::size_t>(s)], s);
    ASSERT_EQ(run.tile_start[static_cast<std::size_t>(s)], start) << "slot " << s;
    start += 2 * (((s % 5) * 70 + 127) / 128);
  }
  EXPECT_EQ(run.tile_start.back(), start);
}

TEST(FlashFwdSm90EmuTest, ListedOnSm90aOnlyAndNeverWithModifiers) {
  const auto count = [](const std::vector<Variant>& vs) {
    return std::count_if(vs.begin(), vs.end(),
                         [](const Variant& v) { return v.kernel->id == KernelId::kFlashFwdSm90; });
  };
  EXPECT_GT(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"))), 0);
  EXPECT_EQ(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_80"))), 0);
  EXPECT_EQ(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"), kModSoftcap)), 0);
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, require_arch("sm_80")).kernel->id, KernelId::kFlashFwd);
  // Every listed variant fits the shared memory and register rules.
  for (const Variant& v : enumerate_variants("fwd", DType::kBF16, 256, 256, require_arch("sm_90a"))) {
    EXPECT_LE(v.shared_bytes(), 232448) << v.id();
    EXPECT_LE(v.threads(), 512) << v.id();
  }
  try {
    check_variant_fits(parse_variant_id("flash_fwd_sm90/d64.bm64.bn64.st2.pp0.ov0.ra0.ts0.sc0"), 64, 64,
                       require_arch("sm_80"));
    FAIL() << "an sm_90a variant passed as fitting sm_80";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compiles only for sm_90a"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace attune
