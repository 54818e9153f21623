// Score modifiers (softcap, sinks, ALiBi) in the forward and split-KV decode
// kernels on the emulator, against the fp64 reference with FlashAttention's
// accuracy rule: each modifier alone and all together under every mask kind,
// GQA with Dk != Dv, packed variable length, paged decode with splits, rows
// that see no key. Two planted bugs must be caught by the same checks: the
// sink dropped from the split merge, and the softcap applied after the mask.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "combine_without_sink.cuh"
#include "emulator/emulator.h"
#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/flash_fwd_params.h"
#include "softcap_after_mask.cuh"
#include "tests/support/decode_cases.h"
#include "tests/support/emu_forward.h"
#include "tests/support/families.h"

namespace attune {
namespace {

const ArchLimits kArch = require_arch("sm_90a");

// The modifiers' values for a problem: sinks in [-1, 2], ALiBi slopes of the
// usual geometric series (per head, or per batch and head).
struct ModifierData {
  std::vector<float> sinks;
  std::vector<float> slopes;
  ModifierTensors tensors() const {
    return {sinks.empty() ? nullptr : sinks.data(), slopes.empty() ? nullptr : slopes.data()};
  }
};

ModifierData data_for(const AttentionProblem& p) {
  std::mt19937 rng(99);
  ModifierData d;
  if (p.modifiers.sinks) {
    std::uniform_real_distribution<float> sink(-1.0F, 2.0F);
    for (int64_t h = 0; h < p.heads_q; ++h) d.sinks.push_back(sink(rng));
  }
  for (int64_t i = 0; i < alibi_extent(p); ++i) {
    d.slopes.push_back(std::exp2(-8.0F * static_cast<float>(i % p.heads_q + 1) / static_cast<float>(p.heads_q)) *
                       (1.0F + 0.25F * static_cast<float>(i / p.heads_q)));
  }
  return d;
}

struct Named {
  const char* name;
  ScoreModifiers modifiers;
};

const Named kModifierSets[] = {
    {"softcap", {.softcap = 2.5}},
    {"sinks", {.sinks = true}},
    {"alibi", {.alibi = AlibiSlopes::kPerHead}},
    {"all", {.softcap = 4.0, .sinks = true, .alibi = AlibiSlopes::kPerBatchHead}},
};

const Named* find_set(const char* name) {
  for (const Named& n : kModifierSets) {
    if (std::string(n.name) == name) return &n;
  }
  return nullptr;
}

// Runs `variant` (its modifiers the problem's) and applies the rule.
void expect_within_rule(const testing::Inputs& in, const Variant& variant, int splits, const std::string& what) {
  const ModifierData d = data_for(in.problem);
  const ReferenceOutput got = testing::run_on_emulator(in, variant, splits, d.tensors());
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data(), d.tensors());
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data(), d.tensors());
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << what << " with " << variant.id() << ": " << why;
}

testing::Inputs with_modifiers(testing::Family family, const ScoreModifiers& m) {
  family.options.modifiers = m;
  return testing::make_inputs(family);
}

TEST(ScoreModsEmuTest, ForwardEachModifierUnderEveryMaskWithGqaAndDkNeDv) {
  const Mask masks[] = {Mask::none(), Mask::causal_bottom_right(), Mask::causal_top_left(), Mask::window(5, 3)};
  for (const Named& set : kModifierSets) {
    for (const Mask& mask : masks) {
      // 2 x 67 queries against 93 keys (tall enough for empty rows top-left), GQA 4 -> 2, Dk 40, Dv 24.
      testing::Family f{"gqa", {2, 67, 4, 40}, {2, 93, 2, 40}, {2, 93, 2, 24}, {.mask = mask}};
      const testing::Inputs in = with_modifiers(f, set.modifiers);
      const std::uint8_t bits = modifier_bits(set.modifiers);
      const Variant v = heuristic_variant("fwd", in.problem.dtype, 40, 24, kArch, bits);
      EXPECT_EQ(v.modifiers, bits);
      expect_within_rule(in, v, 0, std::string(set.name) + ", mask " + std::string(to_string(mask.kind)));
    }
  }
}

TEST(ScoreModsEmuTest, ForwardVarlenAndPaddingWithEmptyRows) {
  const ScoreModifiers all = find_set("all")->modifiers;
  // Packed: a sequence without queries, one without keys (its rows: O = 0, LSE = sink).
  testing::Family packed{
      "packed",
      {30, 2, 32},
      {41, 1, 32},
      {41, 1, 32},
      {.mask = Mask::causal_bottom_right(), .cu_seqlens_q = {0, 9, 9, 22, 30}, .cu_seqlens_k = {0, 17, 20, 41, 41}}};
  const testing::Inputs in = with_modifiers(packed, all);
  expect_within_rule(in, heuristic_variant("fwd", in.problem.dtype, 32, 32, kArch, modifier_bits(all)), 0, "packed");
  testing::Family padded{"padded", {3, 17, 2, 64}, {3, 40, 2, 64}, {3, 40, 2, 64}, {.seqlens_k = {40, 11, 0}}};
  const testing::Inputs pin = with_modifiers(padded, all);
  const ModifierData d = data_for(pin.problem);
  const Variant v = heuristic_variant("fwd", pin.problem.dtype, 64, 64, kArch, modifier_bits(all));
  expect_within_rule(pin, v, 0, "padded");
  // The sequence without keys: O = 0 and LSE = its head's sink, exactly.
  const ReferenceOutput got = testing::run_on_emulator(pin, v, 0, d.tensors());
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 17; ++i) {
      EXPECT_EQ(got.lse[static_cast<std::size_t>(reference_lse_index(pin.problem, 2, i, h))], d.sinks[h]);
      EXPECT_EQ(got.o[static_cast<std::size_t>(reference_o_index(pin.problem, 2, i, h))], 0.0);
    }
  }
}

testing::Inputs paged_decode(const ScoreModifiers& m) {
  testing::DecodeCase c = testing::paged_odd_case(64);
  testing::Inputs in = testing::make_decode_inputs(c);
  AttentionProblem p = in.problem;
  p.modifiers = m;
  validate(p);
  in.problem = p;
  return in;
}

TEST(ScoreModsEmuTest, PagedDecodeWithSplitsMergesTheSinkOnce) {
  for (const Named& set : kModifierSets) {
    const testing::Inputs in = paged_decode(set.modifiers);
    const Variant v = heuristic_decode_variant(in.problem, kArch);
    EXPECT_EQ(v.modifiers, modifier_bits(set.modifiers));
    for (int splits : {1, 3, 7}) {
      expect_within_rule(in, v, splits, std::string(set.name) + ", " + std::to_string(splits) + " splits");
    }
  }
}

TEST(ScoreModsEmuTest, AVariantWithoutTheProblemsModifiersIsRefused) {
  const testing::Inputs in = paged_decode(find_set("sinks")->modifiers);
  const ModifierData d = data_for(in.problem);
  const Variant plain =
      heuristic_decode_variant(testing::make_decode_inputs(testing::paged_odd_case(64)).problem, kArch);
  try {
    (void)testing::run_on_emulator(in, plain, 2, d.tensors());
    FAIL() << "a variant without sinks ran a problem with sinks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compiled without sinks"), std::string::npos) << e.what();
  }
}

// The planted bug of the split merge: flash_decode_combine without the
// sink's term (combine_without_sink.cuh, written at configure time). The
// real combine passes on the same splits.
TEST(ScoreModsEmuTest, PlantedCombineWithoutTheSinkIsCaught) {
  const testing::Inputs in = paged_decode(find_set("sinks")->modifiers);
  const AttentionProblem& p = in.problem;
  const ModifierData d = data_for(p);
  const Variant v = heuristic_decode_variant(p, kArch);
  constexpr int kSplits = 3;
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), d.tensors());
  const ReferenceOutput naive = naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data(), d.tensors());
  const auto run = [&](bool planted) {
    std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
    std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
    std::vector<float> workspace(static_cast<std::size_t>(decode_workspace_floats(p, kSplits)));
    const AttentionBuffers b{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), d.sinks.data(), nullptr};
    const DeviceMetadata metadata{.seqlens_k = p.seqlens_k.data(), .block_table = p.block_table.data()};
    emu::Emulator emulator;
    testing::register_forward_buffers(emulator, in, o, lse);
    emulator.register_buffer("split workspace", workspace.data(), workspace.size() * 4);
    emulator.register_buffer("sinks", d.sinks.data(), d.sinks.size() * 4);
    emulator.register_buffer("seqlens_k", p.seqlens_k.data(), p.seqlens_k.size() * 4);
    emulator.register_buffer("block_table", p.block_table.data(), p.block_table.size() * 4);
    const FlashDecodeParams split_params = flash_decode_params(p, b, metadata, kSplits, workspace.data());
    EXPECT_TRUE(
        v.kernel->launch_on_emulator(p.dtype, v.values, emulator, flash_decode_launch(p, v, kSplits), &split_params));
    const FlashDecodeCombineParams params = flash_decode_combine_params(p, b, {}, kSplits, workspace.data());
    if (planted) {
      emulator.launch(&combine_without_sink::flash_decode_combine<4, Bf16, kAtRunTime>, flash_decode_combine_launch(p),
                      std::bit_cast<combine_without_sink::FlashDecodeCombineParams>(params));
    } else {
      emulator.launch(&flash_decode_combine<4, Bf16, kAtRunTime>, flash_decode_combine_launch(p), params);
    }
    ReferenceOutput out;
    for (std::uint16_t bits : o) out.o.push_back(bits_to_float(p.dtype, bits));
    out.lse.assign(lse.begin(), lse.end());
    return out;
  };
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(run(false), want, naive, 2.0, &why)) << why;
  EXPECT_FALSE(within_accuracy_rule(run(true), want, naive, 2.0, &why)) << "the sink dropped from the merge passed";
}

// The planted bug of the score step: softcap applied after the mask, so a
// masked key weighs e^-c instead of 0 (softcap_after_mask.cuh).
TEST(ScoreModsEmuTest, PlantedSoftcapAfterTheMaskIsCaught) {
  testing::Family f{"causal", {1, 45, 2, 32}, {1, 45, 2, 32}, {1, 45, 2, 32}, {.mask = Mask::causal_bottom_right()}};
  const testing::Inputs in = with_modifiers(f, {.softcap = 2.5});
  const AttentionProblem& p = in.problem;
  const Variant v = parse_variant_id("flash_fwd/d32.bm64.bn32.wm4.wn1.st2.qr0.softcap1");
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data());
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(testing::run_on_emulator(in, v), want, naive, 2.0, &why)) << why;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  const FlashFwdParams params = flash_fwd_params(p, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}, {});
  emu::Emulator emulator;
  testing::register_forward_buffers(emulator, in, o, lse);
  emulator.launch(&softcap_after_mask::flash_fwd<32, 64, 32, 4, 1, 2, 0, Bf16, kAtRunTime, kAtRunTime, kAtRunTime, 0>,
                  flash_fwd_launch(p, v), std::bit_cast<softcap_after_mask::FlashFwdParams>(params));
  ReferenceOutput got;
  for (std::uint16_t bits : o) got.o.push_back(bits_to_float(p.dtype, bits));
  got.lse.assign(lse.begin(), lse.end());
  EXPECT_FALSE(within_accuracy_rule(got, want, naive, 2.0, &why)) << "softcap after the mask passed";
}

}  // namespace
}  // namespace attune
