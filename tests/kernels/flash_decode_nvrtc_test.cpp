// The split-KV decode variants at Dk = Dv in {64, 128}, fp16 and bf16, and
// the combine kernel compile with NVRTC for sm_80 and sm_90a without spills
// (a covering set of each bucket; every variant with ATTUNE_DECODE_SWEEP=all), and so do the
// serving step's single kernels, merge_states and kv_append. (Every head dim is compiled by
// `attune variants list --op decode --compile`, logged in
// docs/perf/flash_decode_resources.md.)
#include <gtest/gtest.h>

#include "generator/variants.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/kv_append_params.h"
#include "runtime/launch/merge_states_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

class FlashDecodeNvrtcTest : public ::testing::TestWithParam<testing::NvrtcCase> {};

TEST_P(FlashDecodeNvrtcTest, EveryVariantAndTheCombineCompile) {
  testing::sweep_op(GetParam(), "decode", {decode_combine_variant()});
}

INSTANTIATE_TEST_SUITE_P(Decode, FlashDecodeNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

TEST(ServingKernelsNvrtcTest, MergeStatesAndKvAppendCompileWithoutSpills) {
  testing::expect_compiled_everywhere_without_spills({merge_states_variant(), kv_append_variant()}, "serving.cu");
}

}  // namespace
}  // namespace attune
