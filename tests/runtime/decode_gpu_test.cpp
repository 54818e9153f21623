// GPU tests (CTest label gpu): split-KV decode through the cuda backend on
// the emulator-checked shapes (FlashAttention's split-KV shapes, GQA 8:1,
// contiguous and paged caches) and the decode covering set, against the fp64
// reference with FlashAttention's accuracy rule. They skip with the
// driver's reason where no GPU exists.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace attune
