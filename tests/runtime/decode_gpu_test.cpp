// GPU tests (CTest label gpu): split-KV decode through the cuda backend on
// the emulator-checked shapes (FlashAttention's split-KV shapes, GQA 8:1,
// contiguous and paged caches) and the decode covering set, against the fp64
// reference with FlashAttention's accuracy rule. They skip with the
// driver's reason where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "core/append_problem.h"
#include "core/dtype.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"
#include "runtime/runtime.h"
#include "tests/support/covering_set.h"
#include "tests/support/decode_cases.h"
#include "tests/support/gpu_runtime_test.h"

namespace attune {
namespace {

class DecodeGpuTest : public testing::GpuRuntimeTest {
 protected:
  // One case on the GPU: `variant` with `splits`, or the dispatcher's choice.
  void check(const testing::DecodeCase& c, const Variant* variant, int splits) {
    const testing::Inputs in = testing::make_decode_inputs(c);
    const AttentionProblem& p = in.problem;
    expect_accurate_on_gpu(
        in,
        [&](const AttentionBuffers& buffers) {
          if (variant != nullptr) {
            runtime_->decode_variant(*variant, splits, p, buffers);
          } else {
            runtime_->decode(p, buffers, {.splits = splits});
          }
        },
        (variant != nullptr ? variant->id() : "dispatched") + " on " + c.name + " with " + std::to_string(splits) +
            " splits");
  }
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
  const testing::Inputs in = testing::make_decode_inputs(testing::paged_gqa_case("paged", {203, 64, 9}));
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

// kv_append on the GPU writes what the emulator writes: a paged cache
// (new keys crossing a page boundary, and one past its row: never written),
// rotary in both pair orders, Q rotated row by row, the lengths after the
// append. The rotation may round differently where the GPU fuses a
// multiply-add (one bf16 ulp); everything else is bit for bit.
TEST_F(DecodeGpuTest, AppendKvWritesWhatTheEmulatorWrites) {
  constexpr int64_t kBatch = 2, kNew = 3, kHkv = 2, kHq = 8, kDim = 128, kPage = 16, kMaxPages = 4, kPool = 9;
  constexpr int64_t kRotary = 64;
  const auto strides = [](int64_t rows, int64_t heads, int64_t dim) {
    return TensorStrides{rows * heads * dim, heads * dim, dim};
  };
  std::uint32_t state = 12345;
  const auto random_bits = [&](int64_t n) {
    std::vector<std::uint16_t> v(static_cast<std::size_t>(n));
    for (std::uint16_t& x : v) {
      state = state * 1664525U + 1013904223U;
      x = float_to_bfloat16_bits(static_cast<float>(static_cast<int>(state >> 9) % 2001 - 1000) / 500.0F);
    }
    return v;
  };
  const std::vector<std::int32_t> lens = {14, 62};  // sequence 1's third key is past its 64
  const std::vector<std::int32_t> table = {8, 0, 1, 2, 3, 4, 5, 6};
  for (bool interleaved : {false, true}) {
    const AppendProblem p{.dtype = DType::kBF16,
                          .batch = kBatch,
                          .seqlen_new = kNew,
                          .heads_kv = kHkv,
                          .head_dim_k = kDim,
                          .head_dim_v = kDim,
                          .k_new_strides = strides(kNew, kHkv, kDim),
                          .v_new_strides = strides(kNew, kHkv, kDim),
                          .page_size = kPage,
                          .num_pages = kPool,
                          .max_pages = kMaxPages,
                          .k_cache_strides = strides(kPage, kHkv, kDim),
                          .v_cache_strides = strides(kPage, kHkv, kDim),
                          .rotary_dim = kRotary,
                          .seqlen_ro = kPage * kMaxPages,
                          .rotary_interleaved = interleaved,
                          .seqlen_q = kNew,
                          .heads_q = kHq,
                          .q_strides = strides(kNew, kHq, kDim),
                          .q_rot_strides = strides(kNew, kHq, kDim),
                          .q_per_row = true};
    const std::vector<std::uint16_t> k_new = random_bits(kBatch * kNew * kHkv * kDim);
    const std::vector<std::uint16_t> v_new = random_bits(kBatch * kNew * kHkv * kDim);
    const std::vector<std::uint16_t> q = random_bits(kBatch * kNew * kHq * kDim);
    const std::vector<std::uint16_t> cos = random_bits(p.seqlen_ro * kRotary / 2);
    const std::vector<std::uint16_t> sin = random_bits(p.seqlen_ro * kRotary / 2);
    const std::vector<std::uint16_t> cache = random_bits(kPool * kPage * kHkv * kDim);

    // The emulator: host memory.
    std::vector<std::uint16_t> emu_k = cache, emu_v = cache, emu_q(q.size());
    std::vector<std::int32_t> emu_lens(kBatch, -1);
    Runtime emulator({.backend = Backend::kEmu});
    emulator.append_kv(p, {k_new.data(), v_new.data(), emu_k.data(), emu_v.data(), q.data(), emu_q.data(), cos.data(),
                           sin.data(), lens.data(), emu_lens.data(), table.data()});

    // The caches start as the host's and come back appended.
    std::vector<std::uint16_t> gpu_k = cache, gpu_v = cache, gpu_q(q.size());
    std::vector<std::int32_t> gpu_lens(kBatch);
    cuda::run_on_device(
        cuda::Driver::get(), nullptr,
        {cuda::in(k_new), cuda::in(v_new), cuda::inout(gpu_k), cuda::inout(gpu_v), cuda::in(q), cuda::out(gpu_q),
         cuda::in(cos), cuda::in(sin), cuda::in(lens), cuda::out(gpu_lens), cuda::in(table)},
        [&](const std::vector<void*>& d) {
          runtime_->append_kv(p,
                              {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], static_cast<const std::int32_t*>(d[8]),
                               static_cast<std::int32_t*>(d[9]), static_cast<const std::int32_t*>(d[10])});
        });

    const std::string what = interleaved ? "interleaved" : "halves";
    EXPECT_EQ(gpu_lens, (std::vector<std::int32_t>{17, 65})) << what;
    EXPECT_EQ(gpu_lens, emu_lens) << what;
    EXPECT_EQ(gpu_v, emu_v) << what << ": V is copied, bit for bit";
    const auto within_an_ulp = [&](const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                                   const char* name) {
      int off = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const float x = bfloat16_bits_to_float(a[i]), y = bfloat16_bits_to_float(b[i]);
        if (std::fabs(x - y) > std::ldexp(std::fmax(std::fabs(x), std::fabs(y)), -7)) ++off;
      }
      EXPECT_EQ(off, 0) << what << ": " << off << " elements of " << name << " differ by more than one ulp";
    };
    within_an_ulp(gpu_k, emu_k, "the key cache");
    within_an_ulp(gpu_q, emu_q, "the rotated q");
    EXPECT_NE(gpu_k, cache) << what << ": the append wrote nothing";
  }
}

}  // namespace
}  // namespace attune
