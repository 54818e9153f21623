// FP8 inputs in the portable kernels on the emulator: flash_fwd over e4m3
// and e5m2 Q, K and V (bf16 out), flash_decode and the paged forward over
// an fp8 KV cache under bf16 and fp16 queries, with descales one per
// tensor, per KV head and per (batch, KV head). The oracle is the fp64
// reference on the dequantized inputs (stored value x descale), the rule
// the forward's against the attention a framework computes after
// dequantizing (reference/accuracy.h). Three planted bugs fail the same
// checks: q and k's descales left out of the scores, v's left out of O, and
// the two fp8 formats' widenings swapped. The Hopper e4m3 forward
// (flash_fwd_sm90 with fp8: 8-bit wgmma, V transposed by the producer, P
// packed to e4m3) over a covering set, GQA, padded and packed keys,
// Dk != Dv, with its own three planted bugs: no q and k descales, V not
// transposed, V's keys not in P's slot order.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "fp8_formats_swapped.cuh"
#include "fp8_no_score_descale.cuh"
#include "fp8_no_v_descale.cuh"
#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/flash_fwd_params.h"
#include "runtime/launch/flash_fwd_sm90_params.h"
#include "sm90_fp8_no_permute.cuh"
#include "sm90_fp8_no_score_descale.cuh"
#include "sm90_fp8_v_not_transposed.cuh"
#include "tests/support/covering_set.h"
#include "tests/support/decode_cases.h"
#include "tests/support/families.h"

namespace attune {
namespace {

// Descale factors for every [b, kv_head] of up to 2 x 4, far from 1 and
// different per entry, so a factor read from the wrong place shows.
struct Descales {
  std::vector<float> q = {0.0625F, 0.5F, 1.75F, 0.25F, 3.0F, 0.125F, 0.75F, 2.5F};
  std::vector<float> k = {0.5F, 0.125F, 2.0F, 1.25F, 0.375F, 4.0F, 0.875F, 0.1875F};
  std::vector<float> v = {2.0F, 0.25F, 0.625F, 3.5F, 1.5F, 0.0625F, 5.0F, 0.75F};
  ModifierTensors tensors(bool with_q) const {
    return {.q_descale = with_q ? q.data() : nullptr, .k_descale = k.data(), .v_descale = v.data()};
  }
};

// The storage's bytes as the kernels read them, O and LSE, and the buffers.
struct Fp8Buffers {
  std::vector<std::uint8_t> q, k, v;
  std::vector<std::uint16_t> o;
  std::vector<float> lse;
  AttentionBuffers buffers;

  Fp8Buffers(const testing::Inputs& in, const ModifierTensors& d)
      : q(storage_bytes(in.problem.dtype, in.q)),
        k(storage_bytes(in.problem.k_dtype(), in.k)),
        v(storage_bytes(in.problem.k_dtype(), in.v)),
        o(static_cast<std::size_t>(o_extent(in.problem)), 0xFFFF),  // NaN: an unwritten output shows
        lse(static_cast<std::size_t>(lse_extent(in.problem)), std::numeric_limits<float>::quiet_NaN()) {
    buffers = {q.data(), k.data(), v.data(), o.data(), lse.data()};
    buffers.q_descale = d.q_descale;
    buffers.k_descale = d.k_descale;
    buffers.v_descale = d.v_descale;
  }
  // Described to an emulator that launches a kernel by hand, with the descales.
  void register_on(emu::Emulator& emulator, const Descales& values) const {
    emulator.register_buffer("Q", q.data(), q.size());
    emulator.register_buffer("K", k.data(), k.size());
    emulator.register_buffer("V", v.data(), v.size());
    emulator.register_buffer("O", o.data(), o.size() * 2);
    emulator.register_buffer("LSE", lse.data(), lse.size() * 4);
    emulator.register_buffer("q_descale", values.q.data(), values.q.size() * 4);
    emulator.register_buffer("k_descale", values.k.data(), values.k.size() * 4);
    emulator.register_buffer("v_descale", values.v.data(), values.v.size() * 4);
  }
  ReferenceOutput output(const AttentionProblem& p) const {
    ReferenceOutput out;
    for (std::uint16_t bits : o) out.o.push_back(bits_to_float(p.compute_dtype(), bits));
    out.lse.assign(lse.begin(), lse.end());
    return out;
  }
};

// splits 0: the forward kernel; otherwise the decode kernel.
ReferenceOutput run(const testing::Inputs& in, const Variant& variant, const ModifierTensors& d, int splits = 0) {
  Fp8Buffers b(in, d);
  const Variant v = with_problem_features(variant, in.problem);
  if (splits == 0) {
    emulate_forward(in.problem, b.buffers, v);
  } else {
    emulate_decode(in.problem, b.buffers, v, splits);
  }
  return b.output(in.problem);
}

bool within_rule(const testing::Inputs& in, const ReferenceOutput& got, const ModifierTensors& d, std::string* why) {
  const AttentionProblem& p = in.problem;
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), d);
  const ReferenceOutput naive = naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data(), d);
  return within_accuracy_rule(got, want, naive, 2.0, why);
}

// 2 x 67 queries against 93 keys, GQA 4 -> 2, descales per (batch, KV head).
testing::Family fp8_family(DType dtype, int64_t d, Mask mask) {
  return {"fp8_gqa",
          {2, 67, 4, d},
          {2, 93, 2, d},
          {2, 93, 2, d},
          {.dtype = dtype, .descale_strides = {.batch = 2, .head = 1}, .mask = mask},
          0.0F,
          2.0F};
}

TEST(Fp8EmuTest, ForwardOverFp8InputsMatchesTheReferenceOnTheirValues) {
  const Descales d;
  for (const int64_t dim : {64, 128, 256}) {
    for (const Mask mask : {Mask::none(), Mask::causal_bottom_right()}) {
      const testing::Inputs in = testing::make_inputs(fp8_family(DType::kE4M3, dim, mask));
      const Variant v = heuristic_variant("fwd", in.problem.compute_dtype(), static_cast<int>(dim),
                                          static_cast<int>(dim), require_arch("sm_90a"));
      std::string why;
      EXPECT_TRUE(within_rule(in, run(in, v, d.tensors(true)), d.tensors(true), &why))
          << v.id() << " d" << dim << " " << to_string(mask.kind) << ": " << why;
    }
  }
  // e5m2, and one factor per tensor (strides 0).
  testing::Family f = fp8_family(DType::kE5M2, 64, Mask::causal_bottom_right());
  f.options.descale_strides = {};
  const testing::Inputs in = testing::make_inputs(f);
  const Variant v = parse_variant_id("flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0");
  std::string why;
  EXPECT_TRUE(within_rule(in, run(in, v, d.tensors(true)), d.tensors(true), &why)) << why;
}

TEST(Fp8EmuTest, TheForwardPicksAnFp8VariantAndWritesBf16) {
  const testing::Inputs in = testing::make_inputs(fp8_family(DType::kE4M3, 64, Mask::none()));
  EXPECT_EQ(in.problem.compute_dtype(), DType::kBF16);
  const Variant v = with_problem_features(parse_variant_id("flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0"), in.problem);
  EXPECT_EQ(v.id(), "flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0.fp81");
  // A variant without the feature is refused, saying what it lacks.
  Fp8Buffers b(in, Descales{}.tensors(true));
  try {
    emulate_forward(in.problem, b.buffers, parse_variant_id("flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0"));
    ADD_FAILURE() << "a variant without fp8 ran fp8 inputs";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compiled without fp8"), std::string::npos) << e.what();
  }
}

// Decode over fp8 caches, contiguous and paged, bf16 and fp16 queries, one
// split and three, query heads packed per KV head and not.
TEST(Fp8EmuTest, DecodeOverAnFp8CacheMatchesTheReference) {
  const Descales d;
  for (const DType kv : {DType::kE4M3, DType::kE5M2}) {
    for (const DType q : {DType::kBF16, DType::kF16}) {
      for (const int64_t page : {0, 16}) {
        testing::DecodeCase c = testing::paged_odd_case(64);
        c.dtype = q;
        c.kv_dtype = kv;
        c.page_size = page;
        testing::Inputs in = testing::make_decode_inputs(c);
        in.problem.descale_strides = {.batch = 0, .head = 1};  // per KV head, as vLLM's per-head scales
        for (const char* id : {"flash_decode/d64.bm16.bn64.wn2.st2.pk1", "flash_decode/d64.bm64.bn32.wn1.st1.pk0"}) {
          for (const int splits : {1, 3}) {
            std::string why;
            EXPECT_TRUE(
                within_rule(in, run(in, parse_variant_id(id), d.tensors(false), splits), d.tensors(false), &why))
                << id << " " << storage_name(q, kv) << " page " << page << " splits " << splits << ": " << why;
          }
        }
      }
    }
  }
}

// Long query chunks over a paged fp8 cache run the forward kernel with pages.
TEST(Fp8EmuTest, ThePagedForwardReadsAnFp8Cache) {
  testing::DecodeCase c = testing::paged_odd_case(64);
  c.seqlen_q = 40;
  c.kv_dtype = DType::kE4M3;
  testing::Inputs in = testing::make_decode_inputs(c);
  in.problem.descale_strides = {.batch = 2, .head = 1};
  const Descales d;
  const Variant v = parse_variant_id("flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0");
  EXPECT_EQ(with_problem_features(v, in.problem).id(), "flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0.paged1.fp81");
  std::string why;
  EXPECT_TRUE(within_rule(in, run(in, v, d.tensors(false)), d.tensors(false), &why)) << why;
}

// ---- planted bugs (copies of the templates with one change each) ----

// flash_fwd's `kernel` (the real one or a mutant) on the emulator.
template <class Params>
ReferenceOutput run_flash_fwd(const testing::Inputs& in, void (*kernel)(Params), const Descales& values) {
  Fp8Buffers b(in, values.tensors(true));
  const AttentionProblem& p = in.problem;
  emu::Emulator emulator;
  b.register_on(emulator, values);
  const Variant v = parse_variant_id("flash_fwd/d64.bm64.bn32.wm4.wn1.st2.qr0");
  emulator.launch(kernel, flash_fwd_launch(p, v), std::bit_cast<Params>(flash_fwd_params(p, b.buffers, {})));
  return b.output(p);
}

template <class Mutant>
void expect_forward_mutant_caught(void (*mutant)(Mutant), DType dtype, const char* what) {
  const Descales d;
  const testing::Inputs in = testing::make_inputs(fp8_family(dtype, 64, Mask::causal_bottom_right()));
  std::string why;
  EXPECT_TRUE(within_rule(in, run_flash_fwd(in, &flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 0, 1>, d),
                          d.tensors(true), &why))
      << why;
  EXPECT_FALSE(within_rule(in, run_flash_fwd(in, mutant, d), d.tensors(true), &why)) << what << " passed";
}

TEST(Fp8EmuTest, PlantedScoresWithoutQAndKDescalesAreCaught) {
  expect_forward_mutant_caught(&fp8_no_score_descale::flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 0, 1>,
                               DType::kE4M3, "the scores without q and k's descales");
}

TEST(Fp8EmuTest, PlantedSwappedFormatsAreCaught) {
  for (const DType dtype : {DType::kE4M3, DType::kE5M2}) {
    expect_forward_mutant_caught(&fp8_formats_swapped::flash_fwd<64, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0, 0, 1>, dtype,
                                 "e4m3 widened as e5m2 and back");
  }
}

// flash_decode's `kernel` with one split over a contiguous fp8 cache.
template <class Params>
ReferenceOutput run_flash_decode(const testing::Inputs& in, void (*kernel)(Params), const Descales& values) {
  Fp8Buffers b(in, values.tensors(false));
  const AttentionProblem& p = in.problem;
  emu::Emulator emulator;
  b.register_on(emulator, values);
  emulator.register_buffer("cache_seqlens", p.seqlens_k.data(), p.seqlens_k.size() * 4);
  const Variant v = parse_variant_id("flash_decode/d64.bm16.bn64.wn2.st2.pk1");
  const DeviceMetadata metadata{.seqlens_k = p.seqlens_k.data()};
  emulator.launch(kernel, flash_decode_launch(p, v, 1),
                  std::bit_cast<Params>(flash_decode_params(p, b.buffers, metadata, 1, nullptr, 0)));
  return b.output(p);
}

TEST(Fp8EmuTest, PlantedOutputWithoutTheVDescaleIsCaught) {
  testing::DecodeCase c = testing::paged_odd_case(64);
  c.page_size = 0;
  c.kv_dtype = DType::kE4M3;
  testing::Inputs in = testing::make_decode_inputs(c);
  in.problem.descale_strides = {.batch = 2, .head = 1};
  const Descales d;
  std::string why;
  EXPECT_TRUE(within_rule(in, run_flash_decode(in, &flash_decode<64, 16, 64, 2, 2, 1, Bf16, 0, 0, 0, 1>, d),
                          d.tensors(false), &why))
      << why;
  EXPECT_FALSE(
      within_rule(in, run_flash_decode(in, &fp8_no_v_descale::flash_decode<64, 16, 64, 2, 2, 1, Bf16, 0, 0, 0, 1>, d),
                  d.tensors(false), &why))
      << "O without v's descale passed";
}

// ---- the Hopper e4m3 forward ----

const KernelSpec& sm90() { return *find_kernel_spec("flash_fwd_sm90"); }

// e4m3 families the Hopper kernel takes at head dim `d`: GQA with a causal
// mask, keys padded past each sequence (seqlens_k: V's rows there must read
// as zero), packed variable-length sequences, and Dv < Dk.
std::vector<testing::Family> sm90_fp8_families(int64_t d) {
  std::vector<testing::Family> f{fp8_family(DType::kE4M3, d, Mask::causal_bottom_right())};
  testing::Family padded = fp8_family(DType::kE4M3, d, Mask::none());
  padded.name = "fp8_padded_keys";
  padded.options.seqlens_k = {93, 40};
  f.push_back(padded);
  testing::Family packed{"fp8_packed",
                         {150, 4, d},
                         {300, 2, d},
                         {300, 2, d - 16},
                         {.dtype = DType::kE4M3, .descale_strides = {.batch = 2, .head = 1}, .mask = Mask::none()},
                         0.0F,
                         2.0F};
  packed.options.cu_seqlens_q = {0, 70, 150};
  packed.options.cu_seqlens_k = {0, 200, 300};
  f.push_back(packed);
  packed.name = "fp8_packed_causal";
  packed.options.mask = Mask::causal_bottom_right();
  f.push_back(packed);
  return f;
}

// Every value of every tunable of flash_fwd_sm90 at d128 (d256 is the
// heuristic's in ForwardOverFp8InputsMatchesTheReferenceOnTheirValues).
std::vector<Variant> sm90_fp8_set() { return testing::covering_set_of(sm90(), require_arch("sm_90a"), 128); }

class Sm90Fp8Test : public ::testing::TestWithParam<Variant> {};

TEST_P(Sm90Fp8Test, MatchesTheReferenceWithPInE4m3) {
  const Descales d;
  for (const testing::Family& family : sm90_fp8_families(128)) {
    const testing::Inputs in = testing::make_inputs(family);
    ASSERT_EQ(sm90_unfit_reason(in.problem), "") << family.name;  // the Hopper kernel runs, not the fallback
    std::string why;
    EXPECT_TRUE(within_rule(in, run(in, GetParam(), d.tensors(true)), d.tensors(true), &why))
        << GetParam().id() << " " << family.name << ": " << why;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, Sm90Fp8Test, ::testing::ValuesIn(sm90_fp8_set()), testing::variant_test_name);

// What the Hopper kernel takes, and what runs on the portable ones with why.
TEST(Fp8EmuTest, TheHopperKernelTakesE4m3AtHeadDimsAbove64) {
  const auto problem = [](DType dtype, std::optional<DType> kv, int64_t d) {
    return testing::make_inputs({"p", {1, 64, 2, d}, {1, 64, 2, d}, {1, 64, 2, d}, {.dtype = dtype, .kv_dtype = kv}})
        .problem;
  };
  EXPECT_EQ(sm90_unfit_reason(problem(DType::kE4M3, std::nullopt, 128)), "");
  EXPECT_EQ(sm90_unfit_reason(problem(DType::kE4M3, std::nullopt, 256)), "");
  for (const auto& [p, name] : {std::pair{problem(DType::kE4M3, std::nullopt, 64), "e4m3, head dim 64"},
                                std::pair{problem(DType::kE5M2, std::nullopt, 128), "e5m2, head dim 128"},
                                std::pair{problem(DType::kBF16, DType::kE4M3, 128), "bf16-kv-e4m3, head dim 128"}}) {
    const std::string why = sm90_unfit_reason(p);
    EXPECT_NE(why.find(name), std::string::npos) << why;
    EXPECT_NE(why.find("e4m3 Q, K and V at head dims 65 to 256"), std::string::npos) << why;
  }
  // TMA's 16-byte strides are 16 one-byte elements.
  AttentionProblem p = problem(DType::kE4M3, std::nullopt, 128);
  p.k_strides.seq = 136;
  p.v_strides.seq = 136;
  EXPECT_EQ(sm90_unfit_reason(p), "K row stride 136 elements: TMA needs a positive multiple of 16");
  // The heuristic variant with the feature names it.
  const Variant v = with_problem_features(heuristic_variant("fwd", DType::kBF16, 128, 128, require_arch("sm_90a")),
                                          problem(DType::kE4M3, std::nullopt, 128));
  EXPECT_EQ(v.kernel, &sm90());
  EXPECT_NE(v.id().find(".fp81"), std::string::npos) << v.id();
}

// flash_fwd_sm90's `kernel` (the real one or a mutant, d128.bm128.bn128,
// the overlapped schedule) on the emulator, by hand.
constexpr const char* kSm90Fp8Id = "flash_fwd_sm90/d128.bm128.bn128.st2.pp0.ov1.ra0.ts0.sc0";

template <class Params>
ReferenceOutput run_flash_fwd_sm90(const testing::Inputs& in, void (*kernel)(Params), const Descales& values) {
  Fp8Buffers b(in, values.tensors(true));
  const AttentionProblem& p = in.problem;
  emu::Emulator emulator;
  b.register_on(emulator, values);
  const Variant v = with_problem_features(parse_variant_id(kSm90Fp8Id), p);
  const FlashFwdSm90Params params = flash_fwd_sm90_params(p, b.buffers, {}, v, nullptr, encode_emulated_tensor_map);
  emulator.launch(kernel, flash_fwd_sm90_launch(params, v, 132), std::bit_cast<Params>(params));
  return b.output(p);
}

template <class Mutant>
void expect_sm90_mutant_caught(void (*mutant)(Mutant), const char* what) {
  const Descales d;
  const testing::Inputs in = testing::make_inputs(fp8_family(DType::kE4M3, 128, Mask::causal_bottom_right()));
  std::string why;
  EXPECT_TRUE(within_rule(in, run_flash_fwd_sm90(in, &flash_fwd_sm90<128, 128, 128, 2, 0, 1, 0, 0, 0, Bf16, 0, 1>, d),
                          d.tensors(true), &why))
      << why;
  EXPECT_FALSE(within_rule(in, run_flash_fwd_sm90(in, mutant, d), d.tensors(true), &why)) << what << " passed";
}

TEST(Fp8EmuTest, PlantedHopperScoresWithoutQAndKDescalesAreCaught) {
  expect_sm90_mutant_caught(&sm90_fp8_no_score_descale::flash_fwd_sm90<128, 128, 128, 2, 0, 1, 0, 0, 0, Bf16, 0, 1>,
                            "the scores without q and k's descales");
}

TEST(Fp8EmuTest, PlantedHopperVNotTransposedIsCaught) {
  expect_sm90_mutant_caught(&sm90_fp8_v_not_transposed::flash_fwd_sm90<128, 128, 128, 2, 0, 1, 0, 0, 0, Bf16, 0, 1>,
                            "V stored key-major");
}

TEST(Fp8EmuTest, PlantedHopperVKeysOutOfPsOrderAreCaught) {
  expect_sm90_mutant_caught(&sm90_fp8_no_permute::flash_fwd_sm90<128, 128, 128, 2, 0, 1, 0, 0, 0, Bf16, 0, 1>,
                            "V's keys in their own order");
}

}  // namespace
}  // namespace attune
