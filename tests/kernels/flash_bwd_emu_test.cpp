// Backward-kernel variants on the emulator against the fp64 reference
// backward, with FlashAttention's accuracy rule for gradients: each of dQ,
// dK and dV at most three times the error of the naive storage-dtype
// backward, plus a floor. The forward's O and LSE come from the fp64
// reference, so the backward is tested on its own. The covering set holds
// every value of every tunable (both dQ strategies) and runs the seed
// families (every mask kind, empty rows, padding, GQA/MQA, packed varlen,
// Dk != Dv) and odd sequence-length pairs. A launch in which the emulator
// finds a bug (race, cp.async read before wait, out of bounds, the dQ
// atomics included, divergence) throws, so the detectors staying silent is
// part of every check. Planted kernel bugs (copies of the template made at
// configure time) prove that the checks fail when they should.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "flash_bwd_mask_off_by_one.cuh"
#include "flash_bwd_no_row_d.cuh"
#include "flash_bwd_no_tile_barrier.cuh"
#include "generated/kernel_shapes.h"
#include "reference/backward_accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_bwd_params.h"
#include "templates/sequence.cuh"
#include "tests/support/covering_set.h"
#include "tests/support/emu_backward.h"
#include "tests/support/env_guard.h"

namespace attune {

namespace {

using testing::BackwardInputs;

struct Expected {
  ReferenceGradients want;
  ReferenceGradients naive;
};

Expected expected(const BackwardInputs& in) {
  const AttentionProblem& p = in.forward.problem;
  return {reference_backward(p, in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.d_o.data()),
          naive_storage_backward(p, in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.d_o.data())};
}

void check(const BackwardInputs& in, const Variant& variant, const std::string& what, double factor = 3.0) {
  const Expected e = expected(in);
  ReferenceGradients got;
  try {
    got = testing::run_backward_on_emulator(in, variant);
  } catch (const Error& error) {
    ADD_FAILURE() << variant.id() << " on " << what << ": " << error.what();
    return;
  }
  std::string why;
  EXPECT_TRUE(within_gradient_rule(got, e.want, e.naive, in.forward.problem.dtype, factor, &why))
      << variant.id() << " on " << what << ": " << why;
}

void check_families(const Variant& variant, const std::vector<testing::Family>& families) {
  for (const testing::Family& family : families) check(testing::make_backward_inputs(family), variant, family.name);
}

std::vector<Variant> covering_set() { return testing::covering_set(require_arch("sm_90a"), "bwd"); }

TEST(FlashBwdEmuTest, CoveringSetCoversEveryTunableValue) {
  testing::expect_covers_every_tunable_value(covering_set(), "bwd");
}

class CoveringSetTest : public ::testing::TestWithParam<Variant> {};

TEST_P(CoveringSetTest, MatchesReferenceOnSeedAndOddLengthFamilies) {
  const Variant& variant = GetParam();
  // Both dtypes across the set, by the variant's place in it.
  const std::vector<Variant> set = covering_set();
  const auto place = static_cast<std::size_t>(std::find(set.begin(), set.end(), variant) - set.begin());
  const DType dtype = testing::dtype_by_place(set, variant);
  check_families(variant, testing::seed_families(dtype));
  // Two of FlashAttention's odd length pairs (with and without the causal
  // mask), a different two per variant; head dims that fill the bucket on
  // one side only (Dk != Dv).
  const int d = variant.values.front();
  const std::vector<testing::Family> odd = testing::odd_length_families(dtype, d, d - 8);
  const std::size_t pairs = odd.size() / 2;
  std::vector<testing::Family> chosen;
  for (std::size_t k : {place % pairs, (place + pairs / 2) % pairs}) {
    chosen.push_back(odd[2 * k]);
    chosen.push_back(odd[2 * k + 1]);
  }
  check_families(variant, chosen);
}

INSTANTIATE_TEST_SUITE_P(Variants, CoveringSetTest, ::testing::ValuesIn(covering_set()), testing::variant_test_name);

// The seed families as flash_bwd_sm90 takes them: head dims scaled (Dk x 16,
// Dv x 8, so Dk != Dv stays) to rows TMA can step, every other feature of
// the contract (masks, padding, empty rows and key axes, packed varlen,
// GQA/MQA, large and wide logits) as it is.
std::vector<testing::Family> hopper_seed_families(DType dtype) {
  std::vector<testing::Family> out = testing::seed_families(dtype);
  for (testing::Family& f : out) {
    f.q_shape.back() *= 16;
    f.k_shape.back() *= 16;
    f.v_shape.back() *= 8;
  }
  return out;
}

// Every value of every flash_bwd_sm90 tunable over those families (both
// dtypes), each call run by the Hopper kernel itself (the fallback would
// hide it: checked by its variant's TMA fit).
class FlashBwdSm90CoveringSetTest : public ::testing::TestWithParam<Variant> {};

TEST_P(FlashBwdSm90CoveringSetTest, MatchesReferenceOnTheSeedFamilies) {
  const Variant& variant = GetParam();
  const std::vector<Variant> set =
      testing::covering_set_of(*find_kernel_spec("flash_bwd_sm90"), require_arch("sm_90a"));
  const DType dtype = testing::dtype_by_place(set, variant);
  int checked = 0;
  for (const testing::Family& family : hopper_seed_families(dtype)) {
    if (std::max(family.q_shape.back(), family.v_shape.back()) > variant.values.front()) continue;
    const BackwardInputs in = testing::make_backward_inputs(family);
    ASSERT_EQ(sm90_unfit_reason(in.forward.problem), "") << family.name;
    check(in, variant, family.name);
    ++checked;
  }
  EXPECT_GE(checked, 10) << "families of head dims the bucket holds";
}

INSTANTIATE_TEST_SUITE_P(Variants, FlashBwdSm90CoveringSetTest,
                         ::testing::ValuesIn(testing::covering_set_of(*find_kernel_spec("flash_bwd_sm90"),
                                                                      require_arch("sm_90a"))),
                         testing::variant_test_name);

// FlashAttention's overflow test: Q x 5, K and V x 3 make large logits and
// large dP; no NaN or infinity, and within five times the naive error.
TEST(FlashBwdEmuTest, LargeInputsDoNotOverflow) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Variant variant = heuristic_backward_variant(dtype, 64, 64, require_arch("sm_90a"));
    for (int64_t length : {1, 2, 5, 17, 128}) {
      for (const Mask& mask : {Mask::none(), Mask::causal_bottom_right()}) {
        const testing::Family family{"overflow_" + std::to_string(length) + "_" + std::string(to_string(mask.kind)),
                                     {2, length, 2, 64},
                                     {2, length, 2, 64},
                                     {2, length, 2, 64},
                                     ProblemOptions{.dtype = dtype, .mask = mask}};
        check(testing::make_backward_inputs(family, 7, 5.0F, 3.0F, 3.0F), variant,
              family.name + " " + std::string(to_string(dtype)), 5.0);
      }
    }
  }
}

// Packed sequences with no keys and padded sequences with no real key: their
// rows are empty (LSE = -inf). No NaN anywhere, dQ of those rows and dK, dV
// of keys no row sees are exactly zero.
TEST(FlashBwdEmuTest, ZeroKeyLengthsGiveNoNan) {
  testing::Family packed{"packed_zero_keys", {14, 4, 40}, {9, 2, 40}, {9, 2, 24}, {.dtype = DType::kF16}};
  packed.options.cu_seqlens_q = {0, 3, 7, 7, 14};
  packed.options.cu_seqlens_k = {0, 0, 5, 9, 9};  // sequences 0 and 3 have no keys
  testing::Family padded{"padded_zero_keys", {3, 9, 2, 40}, {3, 70, 1, 40}, {3, 70, 1, 40}, {.dtype = DType::kBF16}};
  padded.options.seqlens_k = {0, 70, 33};
  padded.options.mask = Mask::causal_bottom_right();
  for (const testing::Family& family : {packed, padded}) {
    const BackwardInputs in = testing::make_backward_inputs(family);
    for (int atomic : {0, 1}) {
      Variant variant = heuristic_backward_variant(family.options.dtype, 40, 40, require_arch("sm_90a"), atomic == 0);
      const ReferenceGradients got = testing::run_backward_on_emulator(in, variant);
      for (const std::vector<double>* t : {&got.dq, &got.dk, &got.dv}) {
        EXPECT_TRUE(std::all_of(t->begin(), t->end(), [](double x) { return std::isfinite(x); }))
            << variant.id() << " on " << family.name;
      }
      const Expected e = expected(in);
      for (std::size_t i = 0; i < got.dq.size(); ++i) {
        if (e.want.dq[i] == 0) {
          EXPECT_EQ(got.dq[i], 0.0) << family.name << " dQ[" << i << "]";
        }
      }
      for (std::size_t i = 0; i < got.dk.size(); ++i) {
        if (e.want.dk[i] == 0) {
          EXPECT_EQ(got.dk[i], 0.0) << family.name << " dK[" << i << "]";
        }
      }
      std::string why;
      EXPECT_TRUE(within_gradient_rule(got, e.want, e.naive, family.options.dtype, 3.0, &why))
          << variant.id() << " on " << family.name << ": " << why;
    }
  }
}

// Deterministic mode (kDqAtomic = 0): dQ is summed per key block in a fixed
// order, so repeated runs give the same bits. The workspaces start as NaN in
// every run: a read of a slot nobody wrote would show. (The emulator runs
// blocks in a fixed order unless given a seed, so the atomic mode repeats
// here too; the next test changes the order.)
TEST(FlashBwdEmuTest, DeterministicModeRepeatsBitwise) {
  testing::Family family{"gqa_many_key_blocks",
                         {2, 77, 4, 64},
                         {2, 300, 2, 64},
                         {2, 300, 2, 48},
                         {.dtype = DType::kBF16, .mask = Mask::window(90, 20)}};
  const BackwardInputs in = testing::make_backward_inputs(family);
  const Expected e = expected(in);
  // flash_bwd (sm_80) and flash_bwd_sm90 (sm_90a).
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const Variant variant = heuristic_backward_variant(DType::kBF16, 64, 64, require_arch(arch), true);
    ASSERT_EQ(backward_dq_atomic(variant), 0) << variant.id();
    const testing::StoredGradients first = testing::run_backward_bits(in, variant);
    const testing::StoredGradients second = testing::run_backward_bits(in, variant);
    EXPECT_TRUE(first == second) << variant.id();
    std::string why;
    EXPECT_TRUE(within_gradient_rule(testing::to_values(DType::kBF16, first), e.want, e.naive, DType::kBF16, 3.0, &why))
        << variant.id() << ": " << why;
    // The atomic twin computes the same gradients within the rule.
    const Variant atomic = backward_dq_twin(variant, 1).value();
    EXPECT_TRUE(
        within_gradient_rule(testing::run_backward_on_emulator(in, atomic), e.want, e.naive, DType::kBF16, 3.0, &why))
        << atomic.id() << ": " << why;
  }
}

// Under other schedules (ATTUNE_EMU_SEED: blocks in a seeded order, each
// block's threads swept in one), the deterministic mode still gives the same
// bits, while the atomic mode's fp32 sums of dQ change with the order of the
// blocks: the comparison can fail.
TEST(FlashBwdEmuTest, DeterministicModeIsBitwiseUnderAnySchedule) {
  testing::Family family{"gqa_many_key_blocks",
                         {2, 77, 4, 64},
                         {2, 300, 2, 64},
                         {2, 300, 2, 48},
                         {.dtype = DType::kBF16, .mask = Mask::none()}};
  const BackwardInputs in = testing::make_backward_inputs(family);
  const testing::EnvGuard guard({"ATTUNE_EMU_SEED"});
  const auto run = [&](const Variant& v, const char* seed) {
    testing::EnvGuard::set("ATTUNE_EMU_SEED", seed);
    return testing::run_backward_bits(in, v);
  };
  for (const char* arch : {"sm_80", "sm_90a"}) {  // flash_bwd, flash_bwd_sm90
    const Variant deterministic = heuristic_backward_variant(DType::kBF16, 64, 64, require_arch(arch), true);
    const std::optional<Variant> twin = backward_dq_twin(deterministic, 1);
    ASSERT_TRUE(twin.has_value()) << deterministic.id();
    const Variant atomic = *twin;
    const testing::StoredGradients fixed = run(deterministic, "0");
    const testing::StoredGradients atomic_fixed = run(atomic, "0");
    int atomic_changed = 0;
    for (const char* seed : {"1", "2", "3"}) {
      EXPECT_TRUE(run(deterministic, seed) == fixed) << deterministic.id() << " seed " << seed;
      atomic_changed += run(atomic, seed) == atomic_fixed ? 0 : 1;
    }
    EXPECT_GT(atomic_changed, 0) << atomic.id() << ": the atomic dQ gave the same bits under every schedule";
  }
  // A seed that is not a whole number >= 0 is refused, naming the variable and the value.
  for (const char* bad : {"-3", "1x", " 7"}) {
    testing::EnvGuard::set("ATTUNE_EMU_SEED", bad);
    try {
      static_cast<void>(emulated_schedule_seed());
      ADD_FAILURE() << "ATTUNE_EMU_SEED='" << bad << "' was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("ATTUNE_EMU_SEED: got '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(FlashBwdEmuTest, StridedTensors) {
  // Q and dQ inside wider rows (a slice of a fused QKV projection), O and dO
  // with padded heads; K, V, dK and dV contiguous.
  const testing::Family family{"strided",
                               {2, 40, 2, 64},
                               {2, 70, 1, 64},
                               {2, 70, 1, 64},
                               {.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
  const BackwardInputs in = testing::make_backward_inputs(family);
  const AttentionProblem& dense = in.forward.problem;
  AttentionProblem strided = dense;
  strided.q_strides = {.batch = dense.seqlen_q * 3 * 64 * 2, .seq = 3 * 64 * 2, .head = 3 * 64};
  strided.o_strides = {.batch = dense.seqlen_q * 2 * 72, .seq = 2 * 72, .head = 72};
  // Copies rows of `dim` elements between the dense and the strided layout.
  const auto relayout = [&](const std::vector<std::uint16_t>& from, const TensorStrides& from_strides,
                            const TensorStrides& to_strides, int64_t extent, int64_t dim) {
    std::vector<std::uint16_t> to(static_cast<std::size_t>(extent), 0xFFFF);
    for (int64_t b = 0; b < dense.batch; ++b)
      for (int64_t i = 0; i < dense.seqlen_q; ++i)
        for (int64_t h = 0; h < dense.heads_q; ++h)
          for (int64_t d = 0; d < dim; ++d)
            to[static_cast<std::size_t>(element_offset(to_strides, b, i, h) + d)] =
                from[static_cast<std::size_t>(element_offset(from_strides, b, i, h) + d)];
    return to;
  };
  const std::vector<std::uint16_t> q =
      relayout(in.forward.q, dense.q_strides, strided.q_strides, q_extent(strided), 64);
  const std::vector<std::uint16_t> o = relayout(in.o, dense.o_strides, strided.o_strides, o_extent(strided), 64);
  const std::vector<std::uint16_t> d_o = relayout(in.d_o, dense.o_strides, strided.o_strides, o_extent(strided), 64);
  testing::StoredGradients g{std::vector<std::uint16_t>(static_cast<std::size_t>(q_extent(strided)), 0xFFFF),
                             std::vector<std::uint16_t>(in.forward.k.size(), 0xFFFF),
                             std::vector<std::uint16_t>(in.forward.v.size(), 0xFFFF)};
  emulate_backward(strided,
                   {q.data(), in.forward.k.data(), in.forward.v.data(), o.data(), d_o.data(), in.lse.data(),
                    g.dq.data(), g.dk.data(), g.dv.data()},
                   heuristic_backward_variant(DType::kBF16, 64, 64, require_arch("sm_90a")));
  g.dq = relayout(g.dq, strided.q_strides, dense.q_strides, q_extent(dense), 64);
  const Expected e = expected(in);
  std::string why;
  EXPECT_TRUE(within_gradient_rule(testing::to_values(DType::kBF16, g), e.want, e.naive, DType::kBF16, 3.0, &why))
      << why;
}

// The CTAs' order: the longest key blocks first (under a causal mask, the
// first), over an L2 section of (batch, KV head) pairs; deterministic
// mode, as its dQ turns go, the shortest first.
TEST(FlashBwdEmuTest, Sm90TilesRunLongestFirstInL2Sections) {
  using Block = bwd_sm90_detail::KeyBlock<64, 128>;
  const Variant v = parse_variant_id("flash_bwd_sm90/d128.bm64.bn128.st2.at1.tr1.rs1.sw1");
  const auto order_of = [&](std::int64_t seqlen, std::int64_t hq) {
    AttentionProblem p;
    p.batch = 2;
    p.seqlen_q = seqlen;
    p.seqlen_k = seqlen;
    p.heads_q = hq;
    p.heads_kv = 2;
    p.head_dim_k = 128;
    p.head_dim_v = 128;
    p.mask = Mask::causal_bottom_right();
    return flash_bwd_sm90_tiles(p, v);
  };
  // 1k rows: the four (batch, KV head) pairs' Q and dO share L2.
  const sm90_sched::TileOrder small = order_of(1024, 4);
  EXPECT_EQ(small.count(), 8 * 2 * 2);
  EXPECT_EQ(small.section_heads, 4);
  for (i32 i = 0; i < 4; ++i) {
    EXPECT_EQ(Block::tile_at(small, i, false).m_block, 0) << i;  // every pair's longest block first
    EXPECT_EQ(Block::tile_at(small, i, true).m_block, 7) << i;   // deterministic: the shortest
  }
  EXPECT_EQ(Block::tile_at(small, small.count() - 1, false).m_block, 7);
  // 32k rows of 8 query heads per pair: 128 MiB of Q and dO a pair, one pair a section.
  const sm90_sched::TileOrder large = order_of(32768, 16);
  EXPECT_EQ(large.section_heads, 1);
  for (i32 i = 0; i < large.m_blocks; ++i) {
    const sm90_sched::WorkTile t = Block::tile_at(large, i, false);
    EXPECT_EQ(t.m_block, i);
    EXPECT_EQ(t.head, 0);
    EXPECT_EQ(t.batch, 0);
  }
  EXPECT_EQ(Block::tile_at(large, large.m_blocks, false).head, 1);  // the next pair's first
  // More tiles than a 1-D grid numbers (sm90_tile_order, shared with the forward).
  try {
    static_cast<void>(order_of(std::int64_t{1} << 37, 16));
    ADD_FAILURE() << "2^31 tiles were taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("flash_bwd_sm90: 4294967296 tiles (key blocks x heads x batch); expected at "
                                         "most 2^31 - 1"),
              std::string::npos)
        << e.what();
  }
}

// Persistent CTAs where every key block has the same steps
// (flash_bwd_sm90_ctas), one per tile under causal or windowed masks and
// varlen. Through the runtime on two emulated SMs: 2 batches x 2 KV heads
// x 5 key blocks of 64 are 20 tiles on 2 CTAs, each reloading K and V ten
// times while its Q/dO ring runs on across tiles; both dQ paths, both
// modes, against fp64, and the deterministic one bitwise under two orders.
TEST(FlashBwdEmuTest, Sm90PersistentCtasRunMoreTilesThanCtas) {
  const testing::EnvGuard guard({"ATTUNE_EMU_SMS", "ATTUNE_EMU_SEED"});
  testing::EnvGuard::set("ATTUNE_EMU_SMS", "2");
  const testing::Family family{"gqa_persistent",
                               {2, 77, 4, 64},
                               {2, 300, 2, 64},
                               {2, 300, 2, 48},
                               {.dtype = DType::kBF16, .mask = Mask::none()}};
  const BackwardInputs in = testing::make_backward_inputs(family);
  AttentionProblem p = in.forward.problem;
  const Variant first = parse_variant_id("flash_bwd_sm90/d64.bm64.bn64.st3.at1.tr1.rs1.sw1");
  const sm90_sched::TileOrder tiles = flash_bwd_sm90_tiles(p, first);
  ASSERT_EQ(tiles.count(), 20);
  EXPECT_EQ(flash_bwd_launch(p, first, 2).grid.x, 2);
  EXPECT_EQ(flash_bwd_launch(p, first, 132).grid.x, 20);
  p.mask = Mask::causal_bottom_right();
  EXPECT_EQ(flash_bwd_launch(p, first, 2).grid.x, 20) << "causal: one CTA per tile";
  p.mask = Mask::window(64, 0);
  EXPECT_EQ(flash_bwd_launch(p, first, 2).grid.x, 20) << "windowed: one CTA per tile";
  p.mask = Mask::none();
  p.cu_seqlens_q = {0, 40, 77};
  EXPECT_EQ(flash_bwd_launch(p, first, 2).grid.x, flash_bwd_sm90_tiles(p, first).count()) << "varlen";
  for (const char* id :
       {"flash_bwd_sm90/d64.bm64.bn64.st3.at1.tr1.rs1.sw1", "flash_bwd_sm90/d64.bm64.bn64.st2.at0.tr1.rs1.sw1",
        "flash_bwd_sm90/d64.bm64.bn64.st2.at1.tr0.rs1.sw1"}) {
    check(in, parse_variant_id(id), family.name);
  }
  const Variant deterministic = parse_variant_id("flash_bwd_sm90/d64.bm64.bn64.st2.at0.tr1.rs1.sw1");
  testing::EnvGuard::set("ATTUNE_EMU_SEED", "1");
  const testing::StoredGradients one = testing::run_backward_bits(in, deterministic);
  testing::EnvGuard::set("ATTUNE_EMU_SEED", "2");
  EXPECT_TRUE(testing::run_backward_bits(in, deterministic) == one) << "seeds 1 and 2";
}

TEST(FlashBwdEmuTest, HeuristicIsAnEnumeratedVariant) {
  for (const char* arch_name : {"sm_80", "sm_86", "sm_90a"}) {
    const ArchLimits arch = require_arch(arch_name);
    for (int d : {16, 64, 96, 128, 160, 192, 224, 256}) {
      for (bool deterministic : {false, true}) {
        const Variant h = heuristic_backward_variant(DType::kF16, d, d, arch, deterministic);
        // flash_bwd_sm90 where it is listed (sm_90a, head dims up to 128).
        const bool hopper = arch.name == "sm_90a" && d <= 128;
        EXPECT_EQ(h.kernel->id, hopper ? KernelId::kFlashBwdSm90 : KernelId::kFlashBwd) << h.id();
        EXPECT_EQ(backward_dq_atomic(h), deterministic ? 0 : 1) << h.id();
        const std::vector<Variant> all = enumerate_variants("bwd", DType::kF16, d, d, arch);
        EXPECT_NE(std::find(all.begin(), all.end(), h), all.end()) << h.id() << " on " << arch_name;
      }
    }
  }
}

// query_tiles (closed form) against the walk it replaced: each tile's
// first and last rows' bounds, asked tile by tile. Every band of the mask
// (left and right around the tile sizes, both frames), lengths around the
// tile sizes, both key blocks, key blocks past the keys.
template <int kBlockN>
TileRange query_tiles_walked(const MaskParams& mask, i64 key0, i64 q_len, i64 k_len) {
  const i64 tiles = (q_len + 63) / 64;
  TileRange r{tiles, tiles};
  for (i64 m = 0; m < tiles; ++m) {
    const RowBlockKeys keys = row_block_keys(mask, 64 * m, last_row_of(64 * m, 64, q_len), q_len, k_len);
    if (keys.first.begin < key0 + kBlockN && keys.last.end > key0 && keys.last.end > keys.first.begin) {
      r.begin = r.begin == tiles ? m : r.begin;
      r.end = m + 1;
    }
  }
  return r;
}

TEST(FlashBwdEmuTest, QueryTilesInClosedFormAgreeWithTheWalk) {
  int seen = 0;
  for (const i32 left : {-1, 0, 1, 5, 63, 64, 65, 129, 1000}) {
    for (const i32 right : {-1, 0, 1, 5, 63, 64, 65, 129, 1000}) {
      for (const i32 top_left : {0, 1}) {
        const MaskParams mask{left, right, top_left};
        for (const i64 q_len : {1, 37, 63, 64, 65, 130, 300, 700}) {
          for (const i64 k_len : {1, 63, 64, 65, 129, 250, 520, 900}) {
            for (i64 key0 = 0; key0 < k_len + 256; key0 += 64) {
              const TileRange want = query_tiles_walked<64>(mask, key0, q_len, k_len);
              const TileRange got = query_tiles<64, 64>(mask, key0, q_len, k_len);
              const TileRange want2 = query_tiles_walked<128>(mask, key0, q_len, k_len);
              const TileRange got2 = query_tiles<64, 128>(mask, key0, q_len, k_len);
              ASSERT_TRUE(got.begin == want.begin && got.end == want.end && got2.begin == want2.begin &&
                          got2.end == want2.end)
                  << "mask (" << left << ", " << right << ", top_left " << top_left << "), Sq " << q_len << ", Sk "
                  << k_len << ", key0 " << key0 << ": 64 keys [" << got.begin << ", " << got.end << ") want ["
                  << want.begin << ", " << want.end << "); 128 keys [" << got2.begin << ", " << got2.end << ") want ["
                  << want2.begin << ", " << want2.end << ")";
              seen += want.end > want.begin ? 1 : 0;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(seen, 20000) << "key blocks some tile sees";
}

// The deterministic turns' count in closed form (later_key_blocks_seen:
// the key tiles a query tile's rows see, after the block, for a block that
// sees the tile) against every key block's own query_tiles, the steps it
// actually runs: a disagreement leaves a turn that is never reached. Every
// mask kind, lengths around the tile sizes, both key blocks, one key block
// past the keys; the same comparison with the count shifted by one block
// is caught. And the free tiles in closed form (free_query_tiles: the steps
// the unmasked loop runs) against each tile's own sees_all: a free tile
// counted masked only costs time, a masked tile counted free loses its mask.
template <int kBlockN>
void expect_turn_counts_agree(const MaskParams& mask, i64 q_len, i64 k_len, int* shifted_mismatches, int* nonzero,
                              int* free_tiles) {
  const i64 key_blocks = (k_len + kBlockN - 1) / kBlockN + 1;
  const i64 tiles = (q_len + 63) / 64;
  std::vector<TileRange> ranges;
  for (i64 n = 0; n < key_blocks; ++n) ranges.push_back(query_tiles<64, kBlockN>(mask, n * kBlockN, q_len, k_len));
  const auto sees = [&](i64 block, i64 tile) { return tile >= ranges[block].begin && tile < ranges[block].end; };
  for (i64 block = 0; block < key_blocks; ++block) {
    const TileRange free = free_query_tiles<64, kBlockN>(mask, block * kBlockN, q_len, k_len);
    for (i64 tile = 0; tile < tiles; ++tile) {
      const i64 row0 = tile * 64;
      const bool sees_all =
          row_block_keys(mask, row0, last_row_of(row0, 64, q_len), q_len, k_len).sees_all(block * kBlockN, kBlockN) &&
          block * kBlockN + kBlockN <= k_len;
      ASSERT_EQ(tile >= free.begin && tile < free.end, sees_all)
          << "free tiles [" << free.begin << ", " << free.end << "): mask (" << mask.left << ", " << mask.right
          << ", top_left " << mask.top_left << "), Sq " << q_len << ", Sk " << k_len << ", key block " << block << " ("
          << kBlockN << " keys), query tile " << tile;
      *free_tiles += sees_all ? 1 : 0;
      if (!sees(block, tile)) continue;  // not one of the block's steps
      i64 want = 0;
      for (i64 n = block + 1; n < key_blocks; ++n) want += sees(n, tile) ? 1 : 0;
      const i64 got = later_key_blocks_seen<64, kBlockN>(mask, tile, block, key_blocks, q_len, k_len);
      ASSERT_EQ(got, want) << "mask (" << mask.left << ", " << mask.right << ", top_left " << mask.top_left << "), Sq "
                           << q_len << ", Sk " << k_len << ", key block " << block << " of " << key_blocks << " ("
                           << kBlockN << " keys), query tile " << tile;
      *nonzero += want > 0 ? 1 : 0;
      if (block > 0 && sees(block - 1, tile)) {
        *shifted_mismatches +=
            later_key_blocks_seen<64, kBlockN>(mask, tile, block - 1, key_blocks, q_len, k_len) != want;
      }
    }
  }
}

TEST(FlashBwdEmuTest, Sm90TurnCountsAndFreeTilesAgreeWithEveryBlocksQueryTiles) {
  std::vector<MaskParams> masks;
  for (const Mask& m :
       {Mask::none(), Mask::causal_bottom_right(), Mask::causal_top_left(), Mask::window(3, 5), Mask::window(64, 0),
        Mask::window(0, 0), Mask::window(200, -1), Mask::window(-1, 70), Mask::window(130, 129)}) {
    masks.push_back(mask_params(m));
  }
  int shifted = 0;
  int nonzero = 0;
  int free_tiles = 0;
  for (const MaskParams& mask : masks) {
    for (const i64 q_len : {1, 37, 64, 65, 130, 300, 700}) {
      for (const i64 k_len : {1, 63, 64, 129, 250, 520, 900}) {
        expect_turn_counts_agree<64>(mask, q_len, k_len, &shifted, &nonzero, &free_tiles);
        expect_turn_counts_agree<128>(mask, q_len, k_len, &shifted, &nonzero, &free_tiles);
      }
    }
  }
  EXPECT_GT(nonzero, 1000) << "cases where some later block takes its turn first";
  EXPECT_GT(shifted, 100) << "the count one block off was not told apart";
  EXPECT_GT(free_tiles, 1000) << "steps the unmasked loop runs";
}

// flash_bwd_sm90 takes softcap and ALiBi (features) and sinks (the
// dsink kernel's): the heuristic keeps it on sm_90a for every mix of them;
// dropout moves the call to flash_bwd. The forward's Hopper fit refuses
// the modifiers, the backward's does not.
// The query tile the heuristic takes: 128 rows at d64 (the accumulators
// fit), deterministic or not, unless softcap or ALiBi is compiled in (their
// elementwise work at 128 rows spills); 64 rows at d128.
TEST(FlashBwdEmuTest, Sm90Takes128QueryRowsAtD64WithoutElementModifiers) {
  const ArchLimits hopper = require_arch("sm_90a");
  const auto rows_of = [](const Variant& v) {
    return v.id().find(".bm128.") != std::string::npos ? 128 : v.id().find(".bm64.") != std::string::npos ? 64 : 0;
  };
  for (const bool deterministic : {false, true}) {
    for (const std::uint8_t bits : {std::uint8_t{0}, kModSinks, kModSoftcap, kModAlibi}) {
      const Variant v = heuristic_backward_variant(DType::kBF16, 64, 64, hopper, deterministic, bits);
      ASSERT_EQ(v.kernel->id, KernelId::kFlashBwdSm90) << v.id();
      const bool element_mods = (bits & (kModSoftcap | kModAlibi)) != 0;
      EXPECT_EQ(rows_of(v), element_mods ? 64 : 128) << v.id();
    }
    EXPECT_EQ(rows_of(heuristic_backward_variant(DType::kBF16, 128, 128, hopper, deterministic, 0)), 64);
  }
}

TEST(FlashBwdEmuTest, Sm90TakesTheScoreModifiers) {
  const ArchLimits hopper = require_arch("sm_90a");
  for (const std::uint8_t bits : {kModSoftcap, kModAlibi, kModSinks, kModAll}) {
    const Variant v = heuristic_backward_variant(DType::kBF16, 128, 128, hopper, false, bits);
    EXPECT_EQ(v.kernel->id, KernelId::kFlashBwdSm90) << v.id();
    EXPECT_EQ(v.modifiers, bits & ~kModSinks) << v.id();
  }
  const Variant dropout = heuristic_backward_variant(DType::kBF16, 128, 128, hopper, false, kModSoftcap | kModDropout);
  EXPECT_EQ(dropout.kernel->id, KernelId::kFlashBwd) << dropout.id();
  AttentionProblem p = testing::make_inputs(hopper_seed_families(DType::kBF16)[0]).problem;
  p.modifiers = {.softcap = 30.0, .sinks = true, .alibi = AlibiSlopes::kPerHead};
  EXPECT_TRUE(sm90_backward_fit(p).fits()) << sm90_backward_fit(p).reason(p);
  EXPECT_FALSE(sm90_fit(p).fits());
  EXPECT_TRUE(sm90_fit_for(Op::kBackward, p).fits());
  EXPECT_FALSE(sm90_fit_for(Op::kForward, p).fits());
  EXPECT_TRUE(sm90_fit_for(Op::kDecode, p).fits());
}

TEST(FlashBwdEmuTest, RefusesWhatItCannotRun) {
  const BackwardInputs in = testing::make_backward_inputs(testing::seed_families()[0]);
  testing::StoredGradients g{std::vector<std::uint16_t>(in.forward.q.size()),
                             std::vector<std::uint16_t>(in.forward.k.size()),
                             std::vector<std::uint16_t>(in.forward.v.size())};
  const BackwardBuffers buffers{in.forward.q.data(), in.forward.k.data(), in.forward.v.data(),
                                in.o.data(),         in.d_o.data(),       in.lse.data(),
                                g.dq.data(),         g.dk.data(),         g.dv.data()};
  const AttentionProblem& p = in.forward.problem;
  EXPECT_THROW(emulate_backward(p, buffers, heuristic_variant("fwd", p.dtype, 4, 4, require_arch("sm_90a"))),
               InvalidArgument);
  BackwardBuffers overlapping = buffers;
  overlapping.dk = const_cast<std::uint16_t*>(in.forward.k.data());
  EXPECT_THROW(emulate_backward(p, overlapping, heuristic_backward_variant(p.dtype, 4, 4, require_arch("sm_90a"))),
               InvalidArgument);
  BackwardBuffers no_lse = buffers;
  no_lse.lse = nullptr;
  EXPECT_THROW(emulate_backward(p, no_lse, heuristic_backward_variant(p.dtype, 4, 4, require_arch("sm_90a"))),
               InvalidArgument);
  BackwardBuffers shared_grad = buffers;
  shared_grad.dv = shared_grad.dq;
  EXPECT_THROW(validate(p, shared_grad), InvalidArgument);
}

// The planted bugs: copies of templates/flash_bwd.cuh with one change each
// (made at configure time, see CMakeLists.txt), run in place of the real
// main kernel with the real preprocess and convert kernels.
// The mutants' variant: d32.bm64.bn32.wm2.wn2.st2, dQ by atomics.
const Variant& mutant_variant() {
  static const Variant kMutant = parse_variant_id("flash_bwd/d32.bm64.bn32.wm2.wn2.st2.at1");
  return kMutant;
}

// The real main kernel passes the gradient rule through the mutants' harness
// and `mutant` fails it; returns why it failed.
template <class RealParams, class MutantParams>
std::string why_the_mutant_fails(const BackwardInputs& in, DType dtype, void (*real)(RealParams),
                                 void (*mutant)(MutantParams)) {
  const Expected e = expected(in);
  std::string why;
  EXPECT_TRUE(within_gradient_rule(testing::run_with_main_kernel(in, mutant_variant(), real), e.want, e.naive, dtype,
                                   3.0, &why))
      << why;
  const ReferenceGradients bad = testing::run_with_main_kernel(in, mutant_variant(), mutant);
  EXPECT_FALSE(within_gradient_rule(bad, e.want, e.naive, dtype, 3.0, &why));
  return why;
}

TEST(FlashBwdPlantedBugTest, DroppingDFromDsFailsTheRule) {
  const BackwardInputs in = testing::make_backward_inputs(testing::odd_length_families(DType::kBF16, 32, 24)[1]);
  // dS = P dP instead of P (dP - D): dQ and dK go wrong, dV stays right.
  const std::string why = why_the_mutant_fails(in, DType::kBF16, &flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0>,
                                               &no_row_d::flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0>);
  EXPECT_NE(why.find("dQ error"), std::string::npos) << why;
  EXPECT_NE(why.find("dK error"), std::string::npos) << why;
  EXPECT_EQ(why.find("dV error"), std::string::npos) << why;
}

TEST(FlashBwdPlantedBugTest, MaskOffByOneFailsTheRule) {
  // Every row of a causal square sees one key too many: its diagonal's right
  // neighbour.
  const testing::Family family = testing::seed_families(DType::kF16)[1];
  ASSERT_EQ(family.name, "square_causal");
  const std::string why = why_the_mutant_fails(testing::make_backward_inputs(family), DType::kF16,
                                               &flash_bwd<32, 64, 32, 2, 2, 2, 1, Fp16, 0, 0>,
                                               &mask_off_by_one::flash_bwd<32, 64, 32, 2, 2, 2, 1, Fp16, 0, 0>);
  EXPECT_NE(why.find("dV error"), std::string::npos) << why;
}

TEST(FlashBwdPlantedBugTest, MissingBarrierBeforeReadingDsIsARace) {
  const BackwardInputs in = testing::make_backward_inputs(testing::odd_length_families(DType::kBF16, 32, 32)[0]);
  try {
    testing::run_with_main_kernel(in, mutant_variant(),
                                  &no_tile_barrier::flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0>);
    FAIL() << "the missing barrier was not reported";
  } catch (const emu::KernelFault& fault) {
    EXPECT_TRUE(fault.has(emu::BugKind::kSharedRace)) << fault.what();
  }
}

}  // namespace
}  // namespace attune
