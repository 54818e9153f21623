// GPU tests (CTest label gpu): forward variants launched through the cuda
// backend against the fp64 reference with FlashAttention's accuracy rule.
// They skip with the driver's reason where no GPU exists.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/support/covering_set.h"
#include "tests/support/families.h"
#include "tests/support/gpu_runtime_test.h"

namespace attune {
namespace {

class ForwardGpuTest : public testing::GpuRuntimeTest {
 protected:
  // Runs one family on the GPU (with `variant`, or the dispatcher's choice).
  void check(const testing::Family& family, const Variant* variant) {
    const testing::Inputs in = testing::make_inputs(family);
    const AttentionProblem& p = in.problem;
    expect_accurate_on_gpu(
        in,
        [&](const AttentionBuffers& buffers) {
          if (variant != nullptr) {
            runtime_->forward_variant(*variant, p, buffers);
          } else {
            runtime_->forward(p, buffers);
          }
        },
        (variant != nullptr ? variant->id() : "dispatched") + " on " + family.name);
  }
};

TEST_F(ForwardGpuTest, DispatchedVariantOnSeedFamilies) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const testing::Family& family : testing::seed_families(dtype)) check(family, nullptr);
  }
}

TEST_F(ForwardGpuTest, EmulatorCheckedCoveringSetMatchesReference) {
  // The same covering set the emulator checks, now on the GPU.
  for (const Variant& v : testing::covering_set(require_arch("sm_90a"))) {
    if (v.shared_bytes() > runtime_->arch().max_shared_bytes) continue;  // not on this GPU
    const int d = v.values.front();
    for (const testing::Family& family : testing::seed_families(DType::kBF16)) check(family, &v);
    for (const testing::Family& family : testing::odd_length_families(DType::kF16, d, d - 8)) check(family, &v);
  }
}

// Every d64 variant: minutes of compiles, so on request only
// (ATTUNE_FWD_GPU_SWEEP=all); the covering set above runs by default.
TEST_F(ForwardGpuTest, EveryD64VariantOnOddLengths) {
  const char* sweep = std::getenv("ATTUNE_FWD_GPU_SWEEP");
  if (sweep == nullptr || std::string(sweep) != "all") GTEST_SKIP() << "set ATTUNE_FWD_GPU_SWEEP=all to run it";
  for (const Variant& v : enumerate_variants("fwd", DType::kBF16, 64, 64, runtime_->arch())) {
    for (const testing::Family& family : testing::odd_length_families(DType::kBF16, 64, 56)) check(family, &v);
  }
}

}  // namespace
}  // namespace attune
