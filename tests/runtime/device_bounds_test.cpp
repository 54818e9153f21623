// Lengths and block tables a run reads from device memory cannot be checked
// on the host (the graph-safe plans): the kernels clamp a cache length past
// its block-table row (or Sk) and read a page outside the pool as page 0,
// so nothing outside the pool or the table is read (the emulator would
// report any such read as a bug), and the first such event is reported
// (attune::bounds_report). Decode, the forward kernel over pages (chunked
// prefill), key padding on a dense cache, and the backward.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "tests/support/decode_cases.h"
#include "tests/support/families.h"

namespace attune {
namespace {

// A problem's host arrays as a run passes them, with `lengths` and `table`
// in their place when given (the emulator's memory is the host's).
DeviceMetadata metadata_of(const AttentionProblem& p, const std::vector<std::int32_t>* lengths = nullptr,
                           const std::vector<std::int32_t>* table = nullptr) {
  const auto data = [](const std::vector<std::int32_t>& v) { return v.empty() ? nullptr : v.data(); };
  return {.cu_seqlens_q = data(p.cu_seqlens_q),
          .cu_seqlens_k = data(p.cu_seqlens_k),
          .seqlens_k = lengths != nullptr ? lengths->data() : data(p.seqlens_k),
          .block_table = table != nullptr ? table->data() : data(p.block_table)};
}

// Runs `plan` over `in` with the given metadata; a read outside any buffer
// would throw emu::KernelFault.
void run(Runtime& runtime, const Plan& plan, const testing::Inputs& in, const DeviceMetadata& metadata) {
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> workspace(plan.workspace_bytes() / sizeof(float) + 4);
  runtime.run(plan, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}, metadata,
              {workspace.data(), plan.workspace_bytes()});
}

class DeviceBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override { clear_bounds_report(); }
  void TearDown() override { clear_bounds_report(); }
  Runtime runtime_{{.backend = Backend::kEmu}};
};

TEST_F(DeviceBoundsTest, DecodeClampsALengthPastItsRowAndReportsIt) {
  const testing::Inputs in = testing::make_decode_inputs(testing::paged_gqa_case("paged", {203, 64, 9}, {1, 3, 2}));
  const AttentionProblem& p = in.problem;
  const std::int64_t capacity = p.max_pages() * p.page_size;
  for (const int splits : {1, 3}) {
    SCOPED_TRACE(std::to_string(splits) + " splits");
    const Plan plan = runtime_.plan(p, Op::kDecode, {.splits = splits});
    run(runtime_, plan, in, metadata_of(p));
    EXPECT_EQ(bounds_report(), "") << "lengths within their rows report nothing";
    const std::vector<std::int32_t> lengths = {203, static_cast<std::int32_t>(capacity + 5), 9};
    run(runtime_, plan, in, metadata_of(p, &lengths));
    const std::string report = bounds_report();
    EXPECT_NE(report.find("a key length of " + std::to_string(capacity + 5) + " for sequence 1, past the " +
                          std::to_string(capacity) + " keys its block-table row"),
              std::string::npos)
        << report;
    clear_bounds_report();
    EXPECT_EQ(bounds_report(), "");
    const std::vector<std::int32_t> negative = {203, -7, 9};
    run(runtime_, plan, in, metadata_of(p, &negative));
    EXPECT_NE(bounds_report().find("a key length of -7 for sequence 1"), std::string::npos) << bounds_report();
    clear_bounds_report();
  }
}

TEST_F(DeviceBoundsTest, APageOutsideThePoolIsReadAsPageZeroAndReported) {
  const testing::Inputs in = testing::make_decode_inputs(testing::paged_gqa_case("paged", {203, 64, 9}, {1, 3, 2}));
  const AttentionProblem& p = in.problem;
  std::vector<std::int32_t> table = p.block_table;
  const std::int64_t column = 2;  // sequence 1 holds 64 keys: pages 0..3 of its row are read
  table[static_cast<std::size_t>(1 * p.max_pages() + column)] = static_cast<std::int32_t>(p.num_pages + 40);
  for (const Op op : {Op::kDecode, Op::kForward}) {
    const Plan plan = runtime_.plan(p, op, {.splits = op == Op::kDecode ? 2 : 0});
    SCOPED_TRACE(plan.describe());
    run(runtime_, plan, in, metadata_of(p, nullptr, &table));
    EXPECT_NE(bounds_report().find("block_table[1, 2] = " + std::to_string(p.num_pages + 40) +
                                   ", outside the page pool of " + std::to_string(p.num_pages) + " pages"),
              std::string::npos)
        << bounds_report();
    clear_bounds_report();
  }
  table[static_cast<std::size_t>(1 * p.max_pages() + column)] = -3;
  run(runtime_, runtime_.plan(p, Op::kDecode), in, metadata_of(p, nullptr, &table));
  EXPECT_NE(bounds_report().find("block_table[1, 2] = -3"), std::string::npos) << bounds_report();
}

TEST_F(DeviceBoundsTest, TheForwardKernelOverPagesClampsToo) {
  // 150 query rows: Runtime::plan runs the forward kernel over the pages.
  const testing::Inputs in = testing::make_decode_inputs(testing::paged_gqa_case("paged", {203, 64, 160}, {150, 1, 9}));
  const AttentionProblem& p = in.problem;
  const Plan plan = runtime_.plan(p);
  ASSERT_EQ(plan.op(), Op::kForward);
  ASSERT_EQ(plan.variant().kernel->id, KernelId::kFlashFwd) << plan.describe();
  const std::int64_t capacity = p.max_pages() * p.page_size;
  const std::vector<std::int32_t> lengths = {static_cast<std::int32_t>(capacity + 100), 64, 160};
  run(runtime_, plan, in, metadata_of(p, &lengths));
  EXPECT_NE(bounds_report().find("for sequence 0, past the " + std::to_string(capacity) + " keys"), std::string::npos)
      << bounds_report();
}

TEST_F(DeviceBoundsTest, KeyPaddingPastSkIsClampedInTheForward) {
  // A dense cache with per-sequence lengths (key padding): Sk is the capacity.
  const testing::Family family{
      "padded", {2, 7, 2, 32}, {2, 40, 1, 32}, {2, 40, 1, 32}, ProblemOptions{.seqlens_k = {33, 12}}};
  const testing::Inputs in = testing::make_inputs(family);
  const AttentionProblem& p = in.problem;
  ASSERT_TRUE(p.has_seqlens_k());
  const Plan plan = runtime_.plan(p);
  const std::vector<std::int32_t> lengths = {33, static_cast<std::int32_t>(p.seqlen_k + 9)};
  run(runtime_, plan, in, metadata_of(p, &lengths));
  EXPECT_NE(bounds_report().find("for sequence 1, past the " + std::to_string(p.seqlen_k) + " keys"), std::string::npos)
      << bounds_report();
}

}  // namespace
}  // namespace attune
