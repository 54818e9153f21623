// Planted bugs in copies of flash_bwd_sm90 and of the preprocess it shares
// with flash_bwd (made at configure time, see CMakeLists.txt), each caught
// on a problem where the real kernels run clean and within the gradient
// rule: numeric ones (the LSE in the wrong base, dK without the scale, D
// from O instead of dO) by the rule, a stage released before the GEMMs that
// read it are done by the emulator's race check.
#include <gtest/gtest.h>

#include <string>

#include "emulator/emulator.h"
#include "flash_bwd_dpsum_from_o.cuh"
#include "flash_bwd_sm90_dk_unscaled.cuh"
#include "flash_bwd_sm90_early_release.cuh"
#include "flash_bwd_sm90_lse_natural.cuh"
#include "tests/support/emu_backward.h"

namespace attune {
namespace {

// d64 on one consumer (64 keys per CTA), two stages: 300 causal query rows
// against 250 keys over two query heads of one KV head are 4 key blocks of
// up to 10 steps each, so every stage is refilled. Its rows are 128 bytes:
// TMA steps them as laid out.
constexpr const char* kVariant = "flash_bwd_sm90/d64.bm64.bn64.st2.at1";
constexpr int kWarps = 4;  // the row kernels' only variant

testing::BackwardInputs planted_inputs() {
  return testing::make_backward_inputs({"causal_gqa",
                                        {1, 300, 2, 64},
                                        {1, 250, 1, 64},
                                        {1, 250, 1, 64},
                                        ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}});
}

TEST(FlashBwdSm90PlantedTest, TheRealKernelsRunCleanWithinTheRule) {
  const testing::BackwardInputs in = planted_inputs();
  const ReferenceGradients got = testing::run_sm90_with_kernels(
      in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>, &flash_bwd_sm90<64, 64, 64, 2, 1, Bf16>);
  std::string why;
  EXPECT_TRUE(testing::gradients_within_rule(in, got, &why)) << why;
}

TEST(FlashBwdSm90PlantedTest, TheLseInNaturalUnitsFailsTheRule) {
  const testing::BackwardInputs in = planted_inputs();
  const ReferenceGradients got =
      testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                     &sm90_bwd_lse_natural::flash_bwd_sm90<64, 64, 64, 2, 1, Bf16>);
  std::string why;
  EXPECT_FALSE(testing::gradients_within_rule(in, got, &why));
}

TEST(FlashBwdSm90PlantedTest, DkWithoutTheScaleFailsTheRule) {
  const testing::BackwardInputs in = planted_inputs();
  const ReferenceGradients got =
      testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                     &sm90_bwd_dk_unscaled::flash_bwd_sm90<64, 64, 64, 2, 1, Bf16>);
  std::string why;
  EXPECT_FALSE(testing::gradients_within_rule(in, got, &why));
  EXPECT_NE(why.find("dK"), std::string::npos) << why;
}

TEST(FlashBwdSm90PlantedTest, DpsumFromOInsteadOfDoFailsTheRule) {
  const testing::BackwardInputs in = planted_inputs();
  const ReferenceGradients got =
      testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &dpsum_from_o::flash_bwd_preprocess<kWarps, Bf16>,
                                     &flash_bwd_sm90<64, 64, 64, 2, 1, Bf16>);
  std::string why;
  EXPECT_FALSE(testing::gradients_within_rule(in, got, &why));
}

TEST(FlashBwdSm90PlantedTest, AStageReleasedBeforeItsGemmsIsARace) {
  const testing::BackwardInputs in = planted_inputs();
  try {
    testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                   &sm90_bwd_early_release::flash_bwd_sm90<64, 64, 64, 2, 1, Bf16>);
    FAIL() << "the planted bug was not reported";
  } catch (const emu::KernelFault& fault) {
    const std::string what = fault.what();
    EXPECT_TRUE(fault.has(emu::BugKind::kSharedRace)) << what;
    EXPECT_NE(what.find("flash_bwd_sm90_early_release.cuh"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace attune
