// Every variant enumerated for fp16 and bf16 at Dk = Dv in {64, 128} compiles
// with NVRTC for sm_80 and sm_90a; registers and spills are reported, and a
// spilling variant is marked as such.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "generator/variants.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "tests/support/covering_set.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

using Case = testing::NvrtcCase;

class FlashFwdNvrtcTest : public ::testing::TestWithParam<Case> {};

// A covering set of the case's bucket (every value of every tunable and
// every warp partition): the full sweep of every variant took about five
// minutes of CI and passed with 0 spills (docs/perf/resources.md);
// ATTUNE_FWD_SWEEP=all runs it again.
TEST_P(FlashFwdNvrtcTest, EveryVariantCompiles) {
  const Case& c = GetParam();
  const char* all = std::getenv("ATTUNE_FWD_SWEEP");
  if (all != nullptr && std::string(all) == "all") {
    testing::sweep_op(c, "fwd");
    return;
  }
  const std::vector<Variant> set = testing::covering_set_of(kernel_for_op("fwd"), *parse_arch(c.arch), c.head_dim);
  ASSERT_FALSE(set.empty());
  const testing::SweepSummary summary = testing::compile_sweep(set, c.dtype, c.arch, "flash_fwd.cu");
  EXPECT_EQ(summary.compiled, static_cast<int>(set.size()));
  EXPECT_EQ(summary.spilling, 0) << c.arch << " d" << c.head_dim;
}

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
