// Attention dropout in the kernels on the emulator (flash_fwd,
// flash_fwd_sm90, flash_bwd), against the fp64 reference computing the same
// mask from the same function (templates/dropout.h): variants of different
// tiles and warps, the Hopper schedulers over several emulated SM counts,
// packed variable length, the {seed, offset} read from memory, and a
// different offset drawing a different mask. Three planted bugs must fail
// the same checks: the mask drawn from tile-local positions, the backward
// regenerating another offset's mask, and the 1 / (1 - p) scale missing.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "dropout_missing_scale.cuh"
#include "dropout_other_offset.cuh"
#include "dropout_tile_local.cuh"
#include "emulator/emulator.h"
#include "reference/accuracy.h"
#include "reference/backward_accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_fwd_params.h"
#include "tests/support/emu_backward.h"
#include "tests/support/emu_forward.h"
#include "tests/support/env_guard.h"
#include "tests/support/tma_layout.h"

namespace attune {
namespace {

constexpr double kP = 0.17;
constexpr std::uint64_t kSeed = 0x243F6A8885A308D3ULL;
constexpr std::uint64_t kOffset = 8;

ScoreModifiers dropout(std::uint64_t offset = kOffset, double p = kP) {
  return {.dropout_p = p, .seed = kSeed, .offset = offset};
}

// 2 x 67 queries against 93 keys, GQA 4 -> 2, causal bottom-right: rows
// that start mid-tile, partial key tiles, heads and batches that must draw
// different masks. Head dim 64 fits both forward families.
testing::Family gqa_causal(const ScoreModifiers& m, int64_t d = 64) {
  return {
      "gqa_causal", {2, 67, 4, d}, {2, 93, 2, d}, {2, 93, 2, d}, {.mask = Mask::causal_bottom_right(), .modifiers = m}};
}

// Packed: three sequences (one without queries), so positions restart.
testing::Family packed(const ScoreModifiers& m) {
  return {"packed",
          {30, 2, 64},
          {41, 1, 64},
          {41, 1, 64},
          {.mask = Mask::causal_bottom_right(),
           .cu_seqlens_q = {0, 9, 9, 30},
           .cu_seqlens_k = {0, 17, 20, 41},
           .modifiers = m}};
}

bool within_rule(const testing::Inputs& in, const ReferenceOutput& got, const AttentionProblem& want_problem,
                 std::string* why) {
  const ReferenceOutput want = reference_forward(want_problem, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(want_problem, in.q.data(), in.k.data(), in.v.data());
  return within_accuracy_rule(got, want, naive, 2.0, why);
}

void expect_forward(const testing::Inputs& in, const std::string& id) {
  const Variant v = parse_variant_id(id);
  std::string why;
  EXPECT_TRUE(within_rule(in, testing::run_on_emulator(in, v), in.problem, &why)) << id << ": " << why;
}

TEST(DropoutEmuTest, ForwardVariantsOfEveryShapeDrawTheReferencesMask) {
  const testing::Inputs in = testing::make_inputs(gqa_causal(dropout()));
  for (const char* id :
       {"flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.dropout1", "flash_fwd/d64.bm128.bn64.wm4.wn2.st3.qr1.dropout1",
        "flash_fwd/d64.bm64.bn64.wm2.wn2.st1.qr0.dropout1"}) {
    expect_forward(in, id);
  }
  const testing::Inputs tma = testing::with_tma_strides(in);
  for (const char* id : {"flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc0.dropout1",
                         "flash_fwd_sm90/d64.bm64.bn128.st2.pp0.ov0.ra0.ts0.sc2.dropout1"}) {
    expect_forward(tma, id);
  }
}

TEST(DropoutEmuTest, TheHopperSchedulersGiveTheSameBitsOnAnySmCount) {
  const testing::EnvGuard guard({"ATTUNE_EMU_SMS"});
  const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(gqa_causal(dropout())));
  std::vector<double> first;
  for (const char* sms : {"1", "3"}) {
    setenv("ATTUNE_EMU_SMS", sms, 1);
    for (int sc = 0; sc <= 2; ++sc) {
      const Variant v =
          parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc" + std::to_string(sc) + ".dropout1");
      const ReferenceOutput got = testing::run_on_emulator(in, v);
      if (first.empty()) {
        first = got.o;
        std::string why;
        EXPECT_TRUE(within_rule(in, got, in.problem, &why)) << why;
      } else {
        EXPECT_EQ(got.o, first) << v.id() << " on " << sms << " SMs";
      }
    }
  }
}

TEST(DropoutEmuTest, PackedSequencesKeyTheMaskByTheirOwnPositions) {
  const testing::Inputs in = testing::make_inputs(packed(dropout()));
  expect_forward(in, "flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.dropout1");
  expect_forward(testing::with_tma_strides(in), "flash_fwd_sm90/d64.bm64.bn64.st2.pp0.ov1.ra0.ts0.sc1.dropout1");
}

TEST(DropoutEmuTest, AnotherOffsetDrawsAnotherMask) {
  const testing::Inputs in = testing::make_inputs(gqa_causal(dropout()));
  testing::Inputs moved = in;
  moved.problem.modifiers.offset = kOffset + 4;
  const Variant v = parse_variant_id("flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.dropout1");
  const ReferenceOutput got = testing::run_on_emulator(moved, v);
  std::string why;
  EXPECT_TRUE(within_rule(moved, got, moved.problem, &why)) << why;
  EXPECT_FALSE(within_rule(in, got, in.problem, &why)) << "offset + 4 passed as offset's mask";
}

TEST(DropoutEmuTest, TheStateInMemoryReplacesTheProblemsSeedAndOffset) {
  const testing::Inputs in = testing::make_inputs(gqa_causal(dropout()));
  const std::uint64_t state[2] = {kSeed ^ 0x5555, kOffset + 12};
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()};
  buffers.rng_state = state;
  emulate_forward(p, buffers, parse_variant_id("flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.dropout1"));
  ReferenceOutput got;
  for (std::uint16_t bits : o) got.o.push_back(bits_to_float(p.dtype, bits));
  got.lse.assign(lse.begin(), lse.end());
  AttentionProblem drawn = p;
  drawn.modifiers.seed = state[0];
  drawn.modifiers.offset = state[1];
  std::string why;
  EXPECT_TRUE(within_rule(in, got, drawn, &why)) << why;
  EXPECT_FALSE(within_rule(in, got, p, &why)) << "the problem's seed and offset were used";
}

TEST(DropoutEmuTest, BackwardRegeneratesTheForwardsMask) {
  // Warps of 32 queries and of 16 (one query tile pair); dQ by atomics and
  // per key block; the packed family restarts positions per sequence.
  for (const testing::Family& family : {gqa_causal(dropout(), 40), packed(dropout())}) {
    const testing::BackwardInputs in = testing::make_backward_inputs(family);
    for (const char* id :
         {"flash_bwd/d64.bm64.bn64.wm2.wn4.st2.at0.dropout1", "flash_bwd/d64.bm16.bn64.wm1.wn4.st1.at1.dropout1"}) {
      const Variant v = parse_variant_id(id);
      std::string why;
      EXPECT_TRUE(testing::gradients_within_rule(in, testing::run_backward_on_emulator(in, v), &why))
          << v.id() << " on " << family.name << ": " << why;
    }
  }
}

// Dropout beside the score modifiers: the forward with softcap, sinks and
// ALiBi, the backward with softcap (its tanh's derivative) and ALiBi.
TEST(DropoutEmuTest, TheScoreModifiersAndDropoutTogether) {
  ScoreModifiers all = dropout();
  all.softcap = 4.0;
  all.sinks = true;
  all.alibi = AlibiSlopes::kPerHead;
  const testing::Inputs in = testing::make_inputs(gqa_causal(all));
  const std::vector<float> sinks = {0.5F, -1.0F, 1.5F, 0.0F};
  const std::vector<float> slopes = {0.25F, 0.125F, 0.0625F, 0.03125F};
  const ModifierTensors tensors{sinks.data(), slopes.data()};
  const std::uint8_t bits = modifier_bits(all);
  const Variant v = heuristic_variant("fwd", in.problem.dtype, 64, 64, require_arch("sm_90a"), bits);
  EXPECT_EQ(v.modifiers, bits) << v.id();
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data(), tensors);
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data(), tensors);
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(testing::run_on_emulator(in, v, 0, tensors), want, naive, 2.0, &why))
      << v.id() << ": " << why;

  ScoreModifiers capped = dropout();
  capped.softcap = 4.0;
  const testing::BackwardInputs bin = testing::make_backward_inputs(gqa_causal(capped, 40));
  const Variant bv =
      heuristic_backward_variant(DType::kBF16, 40, 40, require_arch("sm_90a"), false, modifier_bits(capped));
  EXPECT_TRUE(testing::gradients_within_rule(bin, testing::run_backward_on_emulator(bin, bv), &why))
      << bv.id() << ": " << why;
}

// ---- planted bugs (copies of the templates with one change each) ----

// flash_fwd's `kernel` (the real one or a mutant with the same params
// layout) on the emulator.
template <class Params>
ReferenceOutput run_flash_fwd(const testing::Inputs& in, void (*kernel)(Params), const Variant& v) {
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  const FlashFwdParams params = flash_fwd_params(p, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}, {});
  emu::Emulator emulator;
  testing::register_forward_buffers(emulator, in, o, lse);
  emulator.launch(kernel, flash_fwd_launch(p, v), std::bit_cast<Params>(params));
  ReferenceOutput out;
  for (std::uint16_t bits : o) out.o.push_back(bits_to_float(p.dtype, bits));
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

template <class Mutant>
void expect_forward_mutant_caught(void (*mutant)(Mutant), const char* what) {
  const testing::Inputs in = testing::make_inputs(gqa_causal(dropout()));
  const Variant v = parse_variant_id("flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.dropout1");
  std::string why;
  EXPECT_TRUE(
      within_rule(in, run_flash_fwd(in, &flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 1>, v), in.problem, &why))
      << why;
  EXPECT_FALSE(within_rule(in, run_flash_fwd(in, mutant, v), in.problem, &why)) << what << " passed";
}

TEST(DropoutEmuTest, PlantedTileLocalMaskIsCaught) {
  expect_forward_mutant_caught(&dropout_tile_local::flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 1>,
                               "the mask drawn from tile-local positions");
}

TEST(DropoutEmuTest, PlantedMissingScaleIsCaught) {
  expect_forward_mutant_caught(&dropout_missing_scale::flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 1>,
                               "O without 1 / (1 - p)");
}

TEST(DropoutEmuTest, PlantedBackwardWithAnotherOffsetIsCaught) {
  const testing::BackwardInputs in = testing::make_backward_inputs(gqa_causal(dropout(), 32));
  const Variant v = parse_variant_id("flash_bwd/d32.bm64.bn32.wm2.wn2.st2.at1.dropout1");
  std::string why;
  EXPECT_TRUE(testing::gradients_within_rule(
      in, testing::run_with_main_kernel(in, v, &flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0, 1>), &why))
      << why;
  EXPECT_FALSE(testing::gradients_within_rule(
      in, testing::run_with_main_kernel(in, v, &dropout_other_offset::flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0, 1>),
      &why))
      << "the backward's mask from another offset passed";
}

}  // namespace
}  // namespace attune
