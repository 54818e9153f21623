// Every backward variant enumerated for fp16 and bf16 at Dk = Dv in {64,
// 128} compiles with NVRTC for sm_80 and sm_90a, and so do the preprocess
// and dQ-convert kernels; registers and spills are reported (the register
// model of FlashBwdTunables::valid keeps every one of them at or under 255).
#include <gtest/gtest.h>

#include <string>

#include "generator/variants.h"
#include "runtime/launch/flash_bwd_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

using Case = testing::NvrtcCase;

class FlashBwdNvrtcTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashBwdNvrtcTest, EveryVariantCompiles) { testing::sweep_op(GetParam(), "bwd"); }

INSTANTIATE_TEST_SUITE_P(Bwd, FlashBwdNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

TEST(FlashBwdNvrtcTest, RowKernelsCompile) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      const testing::SweepSummary summary =
          testing::compile_sweep({bwd_preprocess_variant(), bwd_dq_convert_variant()}, dtype, arch, "flash_bwd.cu");
      EXPECT_EQ(summary.compiled, 2) << arch << " " << to_string(dtype);
      EXPECT_EQ(summary.spilling, 0) << arch << " " << to_string(dtype);
    }
  }
}

}  // namespace
}  // namespace attune
