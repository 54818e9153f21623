// Planted bugs in copies of flash_bwd_sm90 and of the preprocess it shares
// with flash_bwd (made at configure time, see CMakeLists.txt), each caught
// on a problem where the real kernels run clean and within the gradient
// rule: numeric ones (the LSE in the wrong base, dK without the scale, D
// from O instead of dO, a masked tile run by the unmasked loop) by the
// rule, a stage released before the GEMMs that
// read it are done by the emulator's race check, a persistent CTA's next K
// and V loaded before the last tile's GEMMs read them by its async-proxy
// order check, a deterministic dQ add that skips its turn by the
// emulator's order check (and by its bits), P^T and dS^T read from shared
// memory before every warp stored them by its race or proxy-order check.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "emulator/emulator.h"
#include "flash_bwd_dpsum_from_o.cuh"
#include "flash_bwd_sm90_dk_unscaled.cuh"
#include "flash_bwd_sm90_early_release.cuh"
#include "flash_bwd_sm90_free_too_early.cuh"
#include "flash_bwd_sm90_lse_natural.cuh"
#include "flash_bwd_sm90_no_kv_empty_wait.cuh"
#include "flash_bwd_sm90_no_softcap_chain.cuh"
#include "flash_bwd_sm90_no_turn_wait.cuh"
#include "flash_bwd_sm90_unpublished_pds.cuh"
#include "tests/support/emu_backward.h"

namespace attune {
namespace {

// d64 on one consumer (64 keys per CTA), two stages: 300 causal query rows
// against 250 keys over two query heads of one KV head are 4 key blocks of
// up to 10 steps each, so every stage is refilled. Its rows are 128 bytes:
// TMA steps them as laid out.
constexpr const char* kVariant = "flash_bwd_sm90/d64.bm64.bn64.st2.at1.tr0.rs1.sw1";
constexpr int kWarps = 4;  // the row kernels' only variant

testing::BackwardInputs planted_inputs() {
  return testing::make_backward_inputs({"causal_gqa",
                                        {1, 300, 2, 64},
                                        {1, 250, 1, 64},
                                        {1, 250, 1, 64},
                                        ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}});
}

// Why the gradients of `kernel` after `preprocess` on the planted inputs
// break the gradient rule; empty when they keep it.
template <class Preprocess, class Kernel>
std::string rule_broken_by(Preprocess preprocess, Kernel kernel) {
  const testing::BackwardInputs in = planted_inputs();
  const ReferenceGradients got = testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), preprocess, kernel);
  std::string why;
  if (testing::gradients_within_rule(in, got, &why)) return "";
  return why.empty() ? "outside the rule" : why;
}

TEST(FlashBwdSm90PlantedTest, TheRealKernelsRunCleanWithinTheRule) {
  EXPECT_EQ(rule_broken_by(&flash_bwd_preprocess<kWarps, Bf16>, &flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>), "");
}

TEST(FlashBwdSm90PlantedTest, TheLseInNaturalUnitsFailsTheRule) {
  EXPECT_NE(rule_broken_by(&flash_bwd_preprocess<kWarps, Bf16>,
                           &sm90_bwd_lse_natural::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>),
            "");
}

TEST(FlashBwdSm90PlantedTest, DkWithoutTheScaleFailsTheRule) {
  const std::string why = rule_broken_by(&flash_bwd_preprocess<kWarps, Bf16>,
                                         &sm90_bwd_dk_unscaled::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>);
  EXPECT_NE(why.find("dK"), std::string::npos) << why;
}

// The free steps' loop has no mask code: a diagonal tile counted free
// (its first row does not see every key) sees keys past the diagonal.
TEST(FlashBwdSm90PlantedTest, AMaskedTileRunWithoutItsMaskFailsTheRule) {
  EXPECT_NE(rule_broken_by(&flash_bwd_preprocess<kWarps, Bf16>,
                           &sm90_bwd_free_too_early::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>),
            "");
}

TEST(FlashBwdSm90PlantedTest, DpsumFromOInsteadOfDoFailsTheRule) {
  EXPECT_NE(rule_broken_by(&dpsum_from_o::flash_bwd_preprocess<kWarps, Bf16>,
                           &flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>),
            "");
}

TEST(FlashBwdSm90PlantedTest, AStageReleasedBeforeItsGemmsIsARace) {
  const testing::BackwardInputs in = planted_inputs();
  try {
    testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                   &sm90_bwd_early_release::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>);
    FAIL() << "the planted bug was not reported";
  } catch (const emu::KernelFault& fault) {
    const std::string what = fault.what();
    EXPECT_TRUE(fault.has(emu::BugKind::kSharedRace)) << what;
    EXPECT_NE(what.find("flash_bwd_sm90_early_release.cuh"), std::string::npos) << what;
  }
}

// P^T and dS^T through shared memory (rs0), from S = Q K^T (sw0, stored
// transposed): dV's and dK's GEMMs read rows every warp of the consumer
// stored. The real kernel runs clean within the rule; without the proxy
// fence and barrier before those GEMMs the read is reported.
TEST(FlashBwdSm90PlantedTest, SharedPAndDsReadBeforeEveryWarpStoredThemIsReported) {
  const testing::BackwardInputs in = planted_inputs();
  const Variant v = parse_variant_id("flash_bwd_sm90/d64.bm64.bn64.st2.at1.tr0.rs0.sw0");
  const ReferenceGradients got = testing::run_sm90_with_kernels(in, v, &flash_bwd_preprocess<kWarps, Bf16>,
                                                                &flash_bwd_sm90<64, 64, 64, 2, 1, 0, 0, 0, Bf16>);
  std::string why;
  EXPECT_TRUE(testing::gradients_within_rule(in, got, &why)) << why;
  try {
    testing::run_sm90_with_kernels(in, v, &flash_bwd_preprocess<kWarps, Bf16>,
                                   &sm90_bwd_unpublished_pds::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 0, 0, Bf16>);
    FAIL() << "the planted bug was not reported";
  } catch (const emu::KernelFault& fault) {
    const std::string what = fault.what();
    EXPECT_TRUE(fault.has(emu::BugKind::kSharedRace) || fault.has(emu::BugKind::kAsyncProxyOrder)) << what;
    EXPECT_NE(what.find("flash_bwd_sm90_unpublished_pds.cuh"), std::string::npos) << what;
  }
}

// Softcap (a feature, here read at run time): the real kernel within the
// rule against the fp64 backward of the capped forward; without the tanh's
// derivative in dS it is not.
TEST(FlashBwdSm90PlantedTest, SoftcapWithoutItsChainRuleFailsTheRule) {
  const testing::BackwardInputs in = testing::make_backward_inputs(
      {"causal_gqa_softcap",
       {1, 300, 2, 64},
       {1, 250, 1, 64},
       {1, 250, 1, 64},
       ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right(), .modifiers = {.softcap = 2.0}}},
      1234, 3.0F, 3.0F);  // large logits: most scores reach the tanh's bend
  const Variant v = parse_variant_id(std::string(kVariant) + ".softcap1");
  std::string why;
  EXPECT_TRUE(testing::gradients_within_rule(
      in,
      testing::run_sm90_with_kernels(in, v, &flash_bwd_preprocess<kWarps, Bf16>,
                                     &flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16, kAtRunTime, kAtRunTime>),
      &why))
      << why;
  EXPECT_FALSE(testing::gradients_within_rule(
      in,
      testing::run_sm90_with_kernels(
          in, v, &flash_bwd_preprocess<kWarps, Bf16>,
          &sm90_bwd_no_softcap_chain::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16, kAtRunTime, kAtRunTime>),
      &why));
}

// The kernel runs any number of CTAs (each takes tiles c, c + G, ...),
// whatever grid the runtime would choose for the call: the causal GQA call
// (4 key blocks, 2 query heads) on 1 and 3 CTAs, deterministic and not,
// within the rule, with no report, and the deterministic one with the
// same bits under two orders.
TEST(FlashBwdSm90PlantedTest, TheRealKernelRunsOnAnyNumberOfCtas) {
  const testing::BackwardInputs in = planted_inputs();
  for (const int ctas : {1, 3}) {
    std::string why;
    const ReferenceGradients atomic =
        testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                       &flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>, 0, nullptr, nullptr, ctas);
    EXPECT_TRUE(testing::gradients_within_rule(in, atomic, &why)) << ctas << " CTAs: " << why;
    const Variant deterministic = parse_variant_id("flash_bwd_sm90/d64.bm64.bn64.st2.at0.tr1.rs1.sw1");
    std::vector<std::uint32_t> bits[2];
    for (const std::uint64_t seed : {0, 1}) {
      const ReferenceGradients g = testing::run_sm90_with_kernels(
          in, deterministic, &flash_bwd_preprocess<kWarps, Bf16>, &flash_bwd_sm90<64, 64, 64, 2, 0, 1, 1, 1, Bf16>,
          seed, nullptr, &bits[seed], ctas);
      EXPECT_TRUE(testing::gradients_within_rule(in, g, &why)) << ctas << " CTAs, seed " << seed << ": " << why;
    }
    EXPECT_TRUE(bits[0] == bits[1]) << ctas << " CTAs";
  }
}

// A persistent CTA whose producer loads the next tile's K and V without
// waiting for the consumers to finish the last tile's GEMMs: their wgmma
// reads meet the next tile's TMA writes, which no barrier orders.
TEST(FlashBwdSm90PlantedTest, KAndVReloadedBeforeTheirReadersAreDoneIsReported) {
  const testing::BackwardInputs in = planted_inputs();
  std::string fault;
  testing::run_sm90_with_kernels(in, parse_variant_id(kVariant), &flash_bwd_preprocess<kWarps, Bf16>,
                                 &sm90_bwd_no_kv_empty_wait::flash_bwd_sm90<64, 64, 64, 2, 1, 0, 1, 1, Bf16>, 0, &fault,
                                 nullptr, 1);
  EXPECT_NE(fault.find("shared memory not ordered with the async proxy"), std::string::npos) << fault;
  EXPECT_NE(fault.find("wgmma operand read"), std::string::npos) << fault;
  EXPECT_NE(fault.find("flash_bwd_sm90_no_kv_empty_wait.cuh"), std::string::npos) << fault;
}

// The deterministic dQ of one variant (tr0: red.global, tr1: TMA bulk
// reductions): the real kernel gives the same accumulator under every
// order the blocks run in, within the rule; without the turn's wait every
// order is reported and the bits follow the order.
template <int kTma>
void expect_turns_checked(const char* id) {
  // Every key block adds to every query tile; the fp32 accumulator's bits
  // show the order (the bf16 dQ rarely does).
  const testing::BackwardInputs in = testing::make_backward_inputs(
      {"many_key_blocks", {1, 64, 2, 64}, {1, 512, 1, 64}, {1, 512, 1, 64}, ProblemOptions{.dtype = DType::kBF16}});
  const Variant deterministic = parse_variant_id(id);
  const auto run = [&](auto* main_kernel, std::uint64_t seed, std::string* fault) {
    std::vector<std::uint32_t> workspace;
    const ReferenceGradients g = testing::run_sm90_with_kernels(in, deterministic, &flash_bwd_preprocess<kWarps, Bf16>,
                                                                main_kernel, seed, fault, &workspace);
    return std::pair{g, workspace};
  };
  std::string fault;
  const auto [fixed, fixed_bits] = run(&flash_bwd_sm90<64, 64, 64, 2, 0, kTma, 1, 1, Bf16>, 0, &fault);
  EXPECT_EQ(fault, "");
  for (const std::uint64_t seed : {1, 2, 3}) {
    EXPECT_TRUE(run(&flash_bwd_sm90<64, 64, 64, 2, 0, kTma, 1, 1, Bf16>, seed, &fault).second == fixed_bits)
        << id << " seed " << seed;
    EXPECT_EQ(fault, "");
  }
  std::string why;
  EXPECT_TRUE(testing::gradients_within_rule(in, fixed, &why)) << why;
  int changed = 0;
  for (const std::uint64_t seed : {0, 1, 2, 3}) {
    fault.clear();
    const auto got = run(&sm90_bwd_no_turn_wait::flash_bwd_sm90<64, 64, 64, 2, 0, kTma, 1, 1, Bf16>, seed, &fault);
    EXPECT_NE(fault.find("does not happen before it, so the float sum depends on the order the blocks run in"),
              std::string::npos)
        << id << " seed " << seed << ": " << fault;
    EXPECT_NE(fault.find("flash_bwd_sm90_no_turn_wait.cuh"), std::string::npos) << fault;
    changed += got.second == fixed_bits ? 0 : 1;
  }
  EXPECT_GT(changed, 0) << id << ": the missing wait gave the same dQ accumulator under every order";
}

TEST(FlashBwdSm90PlantedTest, DeterministicDqWithoutItsTurnIsReportedAndChangesBits) {
  expect_turns_checked<0>("flash_bwd_sm90/d64.bm64.bn64.st2.at0.tr0.rs1.sw1");
  expect_turns_checked<1>("flash_bwd_sm90/d64.bm64.bn64.st2.at0.tr1.rs1.sw1");
}

}  // namespace
}  // namespace attune
