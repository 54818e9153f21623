// Variants with features compile with NVRTC for sm_80 and sm_90a: the
// heuristic's variant of every head-dim bucket of the forward, decode and
// backward kernels with every modifier its kernel supports, each modifier
// alone at d128, the forward reading a paged cache (alone in every bucket,
// and with every modifier at d128), and the decode combine and backward
// dsink kernels, the forward and backward with dropout, and the forward and
// decode over fp8 inputs. Registers and spills are reported
// (docs/perf/score_mods.md has the whole space); the heuristic's paged
// forward, its dropout variants, its fp8 variants and its Hopper backward
// variants (softcap and ALiBi) never spill.
#include <gtest/gtest.h>

#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_bwd_params.h"
#include "runtime/launch/flash_decode_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

class ScoreModsNvrtcTest : public ::testing::TestWithParam<const char*> {};

std::vector<Variant> covering_set(const ArchLimits& arch) {
  std::vector<Variant> out;
  const auto add = [&](int d, std::uint8_t bits) {
    // Decode's heuristic reads the problem: one query row per KV head of 8 (packed GQA).
    const ScoreModifiers m{.softcap = (bits & kModSoftcap) != 0 ? 30.0 : 0.0,
                           .sinks = (bits & kModSinks) != 0,
                           .alibi = (bits & kModAlibi) != 0 ? AlibiSlopes::kPerHead : AlibiSlopes::kNone};
    const AttentionProblem decode =
        make_problem(std::vector<std::int64_t>{1, 1, 8, d}, std::vector<std::int64_t>{1, 4096, 1, d},
                     std::vector<std::int64_t>{1, 4096, 1, d}, {.modifiers = m});
    for (const Variant& v :
         {heuristic_variant("fwd", DType::kBF16, d, d, arch, bits), heuristic_decode_variant(decode, arch),
          heuristic_backward_variant(DType::kBF16, d, d, arch, false, bits)}) {
      EXPECT_EQ(v.modifiers, bits & supported_modifiers(*v.kernel)) << v.id();
      out.push_back(v);
    }
  };
  for (int d : {32, 64, 96, 128, 160, 192, 224, 256}) add(d, kModAll);
  for (std::uint8_t bits : {kModSoftcap, kModSinks, kModAlibi}) add(128, bits);
  out.push_back(decode_combine_variant(kModSinks));
  out.push_back(bwd_dsink_variant());
  for (int d : {32, 64, 96, 128, 160, 192, 224, 256}) {
    out.push_back(heuristic_variant("fwd", DType::kBF16, d, d, arch, kFeaturePaged));
  }
  out.push_back(heuristic_variant("fwd", DType::kBF16, 128, 128, arch, kModAll | kFeaturePaged));
  // Dropout (training): the forward and backward heuristics' variants at the
  // smallest, usual and largest buckets (flash_fwd_sm90's on sm_90a).
  for (int d : {64, 128, 256}) {
    out.push_back(heuristic_variant("fwd", DType::kBF16, d, d, arch, kModDropout));
    out.push_back(heuristic_backward_variant(DType::kBF16, d, d, arch, false, kModDropout));
  }
  // FP8 inputs (inference): the forward's variant over fp8 Q, K and V, and
  // decode's over an fp8 paged cache, at the smallest, usual and largest
  // buckets (on sm_80 too: the widening is integer code there).
  for (int d : {64, 128, 256}) {
    out.push_back(heuristic_variant("fwd", DType::kBF16, d, d, arch, kFeatureFp8));
    const AttentionProblem cache =
        make_problem(std::vector<std::int64_t>{4, 1, 8, d}, std::vector<std::int64_t>{64, 16, 1, d},
                     std::vector<std::int64_t>{64, 16, 1, d},
                     {.kv_dtype = DType::kE4M3, .block_table = std::vector<std::int32_t>(64, 0), .page_size = 16});
    out.push_back(with_problem_features(heuristic_decode_variant(cache, arch), cache));
  }
  return out;
}

TEST_P(ScoreModsNvrtcTest, CoveringSetCompiles) {
  const ArchLimits arch = require_arch(GetParam());
  const std::vector<Variant> variants = covering_set(arch);
  const testing::SweepSummary s = testing::compile_sweep(variants, DType::kBF16, GetParam(), "score_mods.cu");
  EXPECT_EQ(s.compiled, static_cast<int>(variants.size()));
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const bool paged_alone =
        (variants[i].modifiers & kFeaturePaged) != 0 && variants[i].modifiers != (kModAll | kFeaturePaged);
    const bool hopper_backward = variants[i].kernel->id == KernelId::kFlashBwdSm90;
    if (paged_alone || hopper_backward || variants[i].modifiers == kModDropout ||
        variants[i].modifiers == kFeatureFp8) {
      EXPECT_EQ(s.spill_bytes[i], 0) << variants[i].id() << " spills";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ScoreModsNvrtcTest, ::testing::Values("sm_80", "sm_90a"));

}  // namespace
}  // namespace attune
