// The forward's variants at Dk = Dv in {64, 128}, fp16 and bf16, compile with
// NVRTC for sm_80 and sm_90a without spills: a covering set of each bucket,
// every variant with ATTUNE_FWD_SWEEP=all (tests/support/nvrtc_sweep.h).
#include <gtest/gtest.h>

#include <string>

#include "generator/variants.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

class FlashFwdNvrtcTest : public ::testing::TestWithParam<testing::NvrtcCase> {};

TEST_P(FlashFwdNvrtcTest, EveryVariantCompiles) { testing::sweep_op(GetParam(), "fwd"); }

INSTANTIATE_TEST_SUITE_P(Fwd, FlashFwdNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

TEST(PtxasUsageTest, ReadsRegistersAndSpills) {
  CompileResult r;
  parse_ptxas_usage(
      "ptxas info    : Function properties for k\n"
      "    48 bytes stack frame, 108 bytes spill stores, 112 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 48 bytes cumulative stack size\n",
      r);
  EXPECT_EQ(r.registers, 255);
  EXPECT_EQ(r.spill_bytes, 220);
  EXPECT_EQ(r.stack_bytes, 48);
  EXPECT_TRUE(r.spills());
}

TEST(NvrtcTest, AFailedCompileIsAValueWithItsLog) {
  const CompileResult r = compile_with_nvrtc("__global__ void k() { undefined_thing(); }", "broken.cu", "k", "sm_90a");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("broken.cu(1): error: identifier \"undefined_thing\" is undefined"), std::string::npos) << r.log;
  EXPECT_TRUE(r.cubin.empty());
}

}  // namespace
}  // namespace attune
