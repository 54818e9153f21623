// The C API through libattune.so (as foreign-function callers use it): error
// codes and messages, forward and paged decode on the emulator.
#include "runtime/attune_c.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "generator/variants.h"
#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "tests/support/decode_cases.h"

namespace attune {
namespace {

TEST(CApiTest, ErrorCodesAndMessages) {
  attune_runtime* rt = nullptr;
  EXPECT_EQ(attune_runtime_create("tpu", 0, &rt), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("backend: got 'tpu'"), std::string::npos) << attune_last_error();
  EXPECT_EQ(rt, nullptr);
  std::string why;
  if (!cuda::Driver::available(&why)) {
    EXPECT_EQ(attune_runtime_create("cuda", 0, &rt), ATTUNE_ERROR_UNAVAILABLE);
    EXPECT_NE(std::string(attune_last_error()).find("libcuda.so.1"), std::string::npos) << attune_last_error();
  }
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();

  attune_problem p;
  attune_problem_init(&p);
  p.seqlen_q = 5;
  p.seqlen_k = 9;
  p.heads_q = 3;
  p.heads_kv = 2;  // not a divisor
  p.head_dim_k = 4;
  p.head_dim_v = 3;
  std::vector<std::uint16_t> q(5 * 3 * 4), k(9 * 2 * 4), v(9 * 2 * 3), o(5 * 3 * 3);
  EXPECT_EQ(attune_forward(rt, &p, q.data(), k.data(), v.data(), o.data(), nullptr, nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("multiple of Hkv"), std::string::npos) << attune_last_error();

  // A valid call: uniform logits (q = 0) average the values exactly.
  p.heads_q = 2;
  p.mask = ATTUNE_MASK_CAUSAL_TOP_LEFT;
  q.assign(5 * 2 * 4, 0);
  k.assign(9 * 2 * 4, 0x3F80);  // bf16 1.0
  for (std::size_t j = 0; j < 9; ++j)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t d = 0; d < 3; ++d) v[(j * 2 + h) * 3 + d] = float_to_bfloat16_bits(static_cast<float>(j));
  o.assign(5 * 2 * 3, 0xFFFF);
  std::vector<float> lse(2 * 5);
  ASSERT_EQ(attune_forward(rt, &p, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr), ATTUNE_OK)
      << attune_last_error();
  EXPECT_EQ(bfloat16_bits_to_float(o[(4 * 2 + 1) * 3]), 2.0F);  // row 4 averages 0..4
  EXPECT_FLOAT_EQ(lse[4], std::log(5.0F));
  EXPECT_STREQ(attune_last_error(), "");
  const char* explained = attune_explain(rt, &p);
  ASSERT_NE(explained, nullptr);
  EXPECT_NE(std::string(explained).find("flash_fwd/d32"), std::string::npos) << explained;
  const std::string listed = enumerate_variants("fwd", DType::kBF16, 32, 32, require_arch("sm_90a")).back().id();
  EXPECT_EQ(attune_forward_variant(rt, listed.c_str(), &p, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_OK)
      << attune_last_error();
  EXPECT_EQ(bfloat16_bits_to_float(o[(4 * 2 + 1) * 3]), 2.0F);
  EXPECT_EQ(
      attune_forward_variant(rt, "flash_fwd/d32.bm64", &p, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr),
      ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("missing bn"), std::string::npos) << attune_last_error();
  EXPECT_EQ(attune_forward(nullptr, &p, q.data(), k.data(), v.data(), o.data(), nullptr, nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  attune_runtime_destroy(rt);
}

TEST(CApiTest, DecodeReadsAPagedCacheThroughTheBlockTable) {
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  // One sequence, 8 query heads on 1 KV head, 70 cached keys in pages of 16
  // stored in reverse order in a pool of 6 pages.
  const testing::Inputs in = testing::make_decode_inputs({.name = "c_api",
                                                          .batch = 1,
                                                          .seqlen_q = 1,
                                                          .heads_q = 8,
                                                          .heads_kv = 1,
                                                          .cache_seqlens = {70},
                                                          .page_size = 16});
  const AttentionProblem& ref = in.problem;
  attune_problem p;
  attune_problem_init(&p);
  p.seqlen_q = 1;
  p.heads_q = 8;
  p.heads_kv = 1;
  p.head_dim_k = 32;
  p.head_dim_v = 32;
  p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
  p.seqlens_k = ref.seqlens_k.data();
  p.block_table = ref.block_table.data();
  p.max_pages = ref.max_pages();
  p.page_size = ref.page_size;
  p.num_pages = ref.num_pages;
  p.seqlen_k = ref.seqlen_k;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  for (int splits : {0, 3}) {
    ASSERT_EQ(attune_decode(rt, &p, splits, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
              ATTUNE_OK)
        << attune_last_error();
    ReferenceOutput got;
    for (std::uint16_t bits : o) got.o.push_back(bits_to_float(ref.dtype, bits));
    got.lse.assign(lse.begin(), lse.end());
    const ReferenceOutput want = reference_forward(ref, in.q.data(), in.k.data(), in.v.data());
    std::string why;
    EXPECT_TRUE(
        within_accuracy_rule(got, want, naive_storage_attention(ref, in.q.data(), in.k.data(), in.v.data()), 2.0, &why))
        << splits << " splits: " << why;
  }
  p.max_pages = 0;  // inconsistent paging
  EXPECT_EQ(attune_decode(rt, &p, 0, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("paged cache"), std::string::npos) << attune_last_error();
  attune_runtime_destroy(rt);
}

// Score modifiers through attune_problem's fields: the paged decode above
// with softcap, sinks and per-batch ALiBi slopes, and the explanation keyed
// by them.
TEST(CApiTest, ScoreModifiersTravelInTheProblem) {
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  testing::Inputs in = testing::make_decode_inputs({.name = "c_api_mods",
                                                    .batch = 2,
                                                    .seqlen_q = 2,
                                                    .heads_q = 4,
                                                    .heads_kv = 2,
                                                    .cache_seqlens = {70, 33},
                                                    .page_size = 16});
  const std::vector<float> sinks = {0.5F, -1.0F, 2.0F, 0.0F};
  const std::vector<float> slopes = {0.25F, 0.125F, 0.0625F, 0.5F, 0.3F, 0.2F, 0.1F, 0.05F};  // [B, Hq]
  AttentionProblem ref = in.problem;
  ref.modifiers = {.softcap = 3.0, .sinks = true, .alibi = AlibiSlopes::kPerBatchHead};
  attune_problem p;
  attune_problem_init(&p);
  EXPECT_EQ(p.softcap, 0.0);
  EXPECT_EQ(p.sinks, nullptr);
  p.batch = 2;
  p.seqlen_q = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim_k = 32;
  p.head_dim_v = 32;
  p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
  p.seqlens_k = ref.seqlens_k.data();
  p.block_table = ref.block_table.data();
  p.max_pages = ref.max_pages();
  p.page_size = ref.page_size;
  p.num_pages = ref.num_pages;
  p.seqlen_k = ref.seqlen_k;
  p.softcap = 3.0;
  p.sinks = sinks.data();
  p.alibi_slopes = slopes.data();
  p.alibi_per_batch = 1;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  const ModifierTensors tensors{sinks.data(), slopes.data()};
  const ReferenceOutput want = reference_forward(ref, in.q.data(), in.k.data(), in.v.data(), tensors);
  const ReferenceOutput naive = naive_storage_attention(ref, in.q.data(), in.k.data(), in.v.data(), tensors);
  for (int splits : {1, 3}) {
    ASSERT_EQ(attune_decode(rt, &p, splits, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
              ATTUNE_OK)
        << attune_last_error();
    ReferenceOutput got;
    for (std::uint16_t bits : o) got.o.push_back(bits_to_float(ref.dtype, bits));
    got.lse.assign(lse.begin(), lse.end());
    std::string why;
    EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << splits << " splits: " << why;
  }
  const char* explained = attune_explain(rt, &p);
  ASSERT_NE(explained, nullptr);
  EXPECT_NE(std::string(explained).find(".softcap1.sinks1.alibi1"), std::string::npos) << explained;
  p.softcap = -2.0;
  EXPECT_EQ(attune_decode(rt, &p, 1, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("softcap: got -2"), std::string::npos) << attune_last_error();
  attune_runtime_destroy(rt);
}

}  // namespace
}  // namespace attune
