// Every split-KV decode variant enumerated for fp16 and bf16 at Dk = Dv in
// {64, 128}, and the combine kernel, compiles with NVRTC for sm_80 and
// sm_90a; registers and spills are reported. (Every head dim is compiled by
// `attune variants list --op decode --compile`, logged in
// docs/perf/flash_decode_resources.md.)
#include <gtest/gtest.h>

#include "generator/variants.h"
#include "runtime/launch/flash_decode_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

using Case = testing::NvrtcCase;

class FlashDecodeNvrtcTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashDecodeNvrtcTest, EveryVariantAndTheCombineCompile) {
  const Case c = GetParam();
  std::vector<Variant> variants = enumerate_variants("decode", c.dtype, c.head_dim, c.head_dim, *parse_arch(c.arch));
  ASSERT_FALSE(variants.empty());
  variants.push_back(decode_combine_variant());
  const testing::SweepSummary summary = testing::compile_sweep(variants, c.dtype, c.arch, "flash_decode.cu");
  EXPECT_EQ(summary.compiled, static_cast<int>(variants.size()));
  RecordProperty("variants", static_cast<int>(variants.size()));
  RecordProperty("spilling", summary.spilling);
}

INSTANTIATE_TEST_SUITE_P(Decode, FlashDecodeNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

}  // namespace
}  // namespace attune
