// GPU tests (CTest label gpu): split-KV decode through the cuda backend on
// the emulator-checked shapes (FlashAttention's split-KV shapes, GQA 8:1,
// contiguous and paged caches) and the decode covering set, against the fp64
// reference with FlashAttention's accuracy rule. They skip with the
// driver's reason where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/runtime.h"
#include "tests/support/covering_set.h"
#include "tests/support/decode_cases.h"
#include "tests/support/gpu_run.h"

namespace attune {
namespace {

class DecodeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::Driver::available(&why)) GTEST_SKIP() << why;
    runtime_ = std::make_unique<Runtime>(RuntimeOptions{.backend = Backend::kCuda});
  }

  // One case on the GPU: `variant` with `splits`, or the dispatcher's choice.
  void check(const testing::DecodeCase& c, const Variant* variant, int splits) {
    const testing::Inputs in = testing::make_decode_inputs(c);
    const AttentionProblem& p = in.problem;
    const ReferenceOutput got = testing::run_on_gpu(in, [&](const AttentionBuffers& buffers) {
      if (variant != nullptr) {
        runtime_->decode_variant(*variant, splits, p, buffers);
      } else {
        runtime_->decode(p, buffers, {.splits = splits});
      }
    });
    std::string why;
    EXPECT_TRUE(within_accuracy_rule(got, reference_forward(p, in.q.data(), in.k.data(), in.v.data()),
                                     naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data()), 2.0, &why))
        << (variant != nullptr ? variant->id() : "dispatched") << " on " << c.name << " with " << splits
        << " splits: " << why;
  }

  std::unique_ptr<Runtime> runtime_;
};

TEST_F(DecodeGpuTest, SplitKvShapesPagedAndContiguous) {
  const std::pair<int64_t, int32_t> shapes[] = {{1, 339}, {3, 1024}, {64, 800}, {3, 799}, {16, 2000}};
  for (const auto& [sq, sk] : shapes) {
    for (int64_t page_size : {0, 16, 256}) {
      for (int splits : {0, 1, 2, 3, 5, 17}) {
        const testing::DecodeCase c{
            .name = std::to_string(sq) + "x" + std::to_string(sk) + "_page" + std::to_string(page_size),
            .batch = 2,
            .seqlen_q = sq,
            .head_dim_k = 128,
            .head_dim_v = 128,
            .cache_seqlens = {sk, std::max<int32_t>(sk - 37, static_cast<int32_t>(sq))},
            .page_size = page_size};
        check(c, nullptr, splits);
      }
    }
  }
}

TEST_F(DecodeGpuTest, CoveringSet) {
  for (const Variant& v : testing::covering_set(runtime_->arch(), "decode")) {
    const int64_t d = v.values.front();
    const testing::DecodeCase c = testing::paged_odd_case(d);
    check(c, &v, 3);
  }
}

// A plan's run reads the cache lengths and the block table from device
// memory: a length past its row and a page outside the pool are clamped by
// the kernel (no read outside the pool) and reported through host-mapped
// memory, which the host reads without a sync once the run is complete.
TEST_F(DecodeGpuTest, DeviceLengthsPastTheRowAndPagesOutsideThePoolAreClampedAndReported) {
  const testing::DecodeCase c{.name = "paged",
                              .batch = 3,
                              .heads_q = 4,
                              .heads_kv = 2,
                              .head_dim_k = 64,
                              .head_dim_v = 64,
                              .cache_seqlens = {203, 64, 9},
                              .page_size = 16};
  const testing::Inputs in = testing::make_decode_inputs(c);
  const AttentionProblem& p = in.problem;
  const Plan plan = runtime_->plan(p, Op::kDecode, {.splits = 2});
  cuda::Driver& driver = cuda::Driver::get();
  std::vector<std::int32_t> lengths = p.seqlens_k;
  lengths[1] = static_cast<std::int32_t>(p.max_pages() * p.page_size + 5);
  std::vector<std::int32_t> table = p.block_table;
  table[static_cast<std::size_t>(2 * p.max_pages())] = static_cast<std::int32_t>(p.num_pages + 3);
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  cuda::DeviceBuffers d(driver, {{in.q.data(), in.q.size() * 2},
                                 {in.k.data(), in.k.size() * 2},
                                 {in.v.data(), in.v.size() * 2},
                                 {nullptr, o.size() * 2},
                                 {nullptr, static_cast<std::size_t>(lse_extent(p)) * sizeof(float)},
                                 {lengths.data(), lengths.size() * 4},
                                 {table.data(), table.size() * 4},
                                 {nullptr, std::max<std::size_t>(plan.workspace_bytes(), 16)}});
  clear_bounds_report();
  runtime_->run(plan, {d.at(0), d.at(1), d.at(2), d.at(3), static_cast<float*>(d.at(4))},
                {.seqlens_k = static_cast<const std::int32_t*>(d.at(5)),
                 .block_table = static_cast<const std::int32_t*>(d.at(6))},
                {d.at(7), plan.workspace_bytes()});
  driver.synchronize(nullptr);
  const std::string report = bounds_report();
  std::cout << "GPU: " << report << "\n";
  EXPECT_TRUE(report.find("for sequence 1, past the") != std::string::npos ||
              report.find("block_table[2, 0] = " + std::to_string(p.num_pages + 3)) != std::string::npos)
      << report;
  clear_bounds_report();
}

}  // namespace
}  // namespace attune
