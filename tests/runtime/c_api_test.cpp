// The C API through libattune.so (as foreign-function callers use it): error
// codes and messages, forward and paged decode on the emulator.
#include "runtime/attune_c.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "generator/variants.h"
#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "templates/dropout.h"
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

// The C form of a host problem (bottom-right causal), its length arrays left NULL.
attune_problem c_problem_of(const AttentionProblem& ref) {
  attune_problem p;
  attune_problem_init(&p);
  p.batch = ref.batch;
  p.seqlen_q = ref.seqlen_q;
  p.seqlen_k = ref.seqlen_k;
  p.heads_q = ref.heads_q;
  p.heads_kv = ref.heads_kv;
  p.head_dim_k = ref.head_dim_k;
  p.head_dim_v = ref.head_dim_v;
  p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
  p.max_pages = ref.max_pages();
  p.page_size = ref.page_size;
  p.num_pages = ref.num_pages;
  return p;
}

// The C API's output (storage bits and float LSE) in the reference's form.
ReferenceOutput output_of(const AttentionProblem& ref, const std::vector<std::uint16_t>& o,
                          const std::vector<float>& lse) {
  ReferenceOutput got;
  for (std::uint16_t bits : o) got.o.push_back(bits_to_float(ref.dtype, bits));
  got.lse.assign(lse.begin(), lse.end());
  return got;
}

// Decodes `in` through the C API with `splits` and holds the result to the
// accuracy rule against `ref` (the problem with its modifiers, if any).
void expect_accurate_decode(attune_runtime* rt, const attune_problem& p, int splits, const testing::Inputs& in,
                            const AttentionProblem& ref, const ModifierTensors& tensors = {}) {
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  ASSERT_EQ(attune_decode(rt, &p, splits, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_OK)
      << attune_last_error();
  const ReferenceOutput want = reference_forward(ref, in.q.data(), in.k.data(), in.v.data(), tensors);
  const ReferenceOutput naive = naive_storage_attention(ref, in.q.data(), in.k.data(), in.v.data(), tensors);
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(output_of(ref, o, lse), want, naive, 2.0, &why)) << splits << " splits: " << why;
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
  attune_problem p = c_problem_of(ref);
  p.seqlens_k = ref.seqlens_k.data();
  p.block_table = ref.block_table.data();
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  for (int splits : {0, 3}) ASSERT_NO_FATAL_FAILURE(expect_accurate_decode(rt, p, splits, in, ref));
  p.max_pages = 0;  // inconsistent paging
  EXPECT_EQ(attune_decode(rt, &p, 0, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("paged cache"), std::string::npos) << attune_last_error();
  attune_runtime_destroy(rt);
}

TEST(CApiTest, TheAbiVersionMatchesTheHeader) {
  EXPECT_EQ(attune_abi_version(), ATTUNE_ABI_VERSION);
  EXPECT_STRNE(attune_version(), "");
}

// Mixed prefill and decode over a paged cache through a plan: lengths
// passed at each run (device_lengths), a workspace from the caller.
TEST(CApiTest, APlanRunsVarlenQueriesOverAPagedCache) {
  attune_runtime_options ro;
  attune_runtime_options_init(&ro);
  ro.backend = "emu";
  ro.tuning_db = "";  // heuristics only
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create_with(&ro, &rt), ATTUNE_OK) << attune_last_error();
  const testing::Inputs in = testing::make_decode_inputs({.name = "c_plan",
                                                          .batch = 3,
                                                          .heads_q = 4,
                                                          .heads_kv = 2,
                                                          .cache_seqlens = {100, 3, 40},
                                                          .page_size = 16,
                                                          .query_lens = {1, 9, 2}});
  const AttentionProblem& ref = in.problem;
  const attune_problem p = c_problem_of(ref);
  attune_plan_options po;
  attune_plan_options_init(&po);
  po.op = ATTUNE_OP_FORWARD;
  po.splits = 3;
  po.device_lengths = 1;
  po.cu_seqlens_q = 1;
  po.seqlens_k = 1;
  po.max_seqlen_q = 10;
  po.max_seqlen_k = ref.seqlen_k;
  attune_plan* plan = nullptr;
  ASSERT_EQ(attune_plan_create(rt, &p, &po, &plan), ATTUNE_OK) << attune_last_error();
  EXPECT_NE(std::string(attune_plan_describe(plan)).find("decode flash_decode/"), std::string::npos)
      << attune_plan_describe(plan);
  size_t bytes = 0;
  ASSERT_EQ(attune_plan_workspace_size(plan, &bytes), ATTUNE_OK);
  ASSERT_GT(bytes, 0U);
  std::vector<float> workspace(bytes / sizeof(float));
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  attune_buffers b{};
  b.q = in.q.data();
  b.k = in.k.data();
  b.v = in.v.data();
  b.o = o.data();
  b.lse = lse.data();
  const attune_metadata m{ref.cu_seqlens_q.data(), nullptr, ref.seqlens_k.data(), ref.block_table.data(), -1};
  ASSERT_EQ(attune_plan_run(rt, plan, &b, &m, workspace.data(), bytes, nullptr), ATTUNE_OK) << attune_last_error();
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(output_of(ref, o, lse),
                                   reference_forward(ref, in.q.data(), in.k.data(), in.v.data()),
                                   naive_storage_attention(ref, in.q.data(), in.k.data(), in.v.data()), 2.0, &why))
      << why;
  // Bad runs: the typed status and what was expected, nothing launched.
  EXPECT_EQ(attune_plan_run(rt, plan, &b, &m, workspace.data(), bytes - 4, nullptr), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("expected at least " + std::to_string(bytes) + " bytes"),
            std::string::npos)
      << attune_last_error();
  attune_metadata bigger = m;
  bigger.batch = 5;
  EXPECT_EQ(attune_plan_run(rt, plan, &b, &bigger, workspace.data(), bytes, nullptr), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("run batch: got 5"), std::string::npos) << attune_last_error();
  EXPECT_EQ(attune_plan_run(rt, plan, &b, nullptr, workspace.data(), bytes, nullptr), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("metadata cu_seqlens_q: got null"), std::string::npos)
      << attune_last_error();
  // Host arrays with device_lengths set are refused.
  attune_problem with_host = p;
  with_host.seqlens_k = ref.seqlens_k.data();
  attune_plan* refused = nullptr;
  EXPECT_EQ(attune_plan_create(rt, &with_host, &po, &refused), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(refused, nullptr);
  attune_plan_destroy(plan);
  attune_runtime_destroy(rt);
}

TEST(CApiTest, MergeStatesOfOnePartialIsThatPartial) {
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  const std::int64_t rows = 5;
  const std::int64_t heads = 2;
  const std::int64_t dim = 8;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(rows * heads * dim));
  std::vector<float> lse(static_cast<std::size_t>(rows * heads));
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = float_to_bits(DType::kBF16, static_cast<float>(i % 7) - 3.0F);
  for (std::size_t i = 0; i < lse.size(); ++i) lse[i] = static_cast<float>(i) * 0.25F;
  std::vector<std::uint16_t> out(o.size());
  std::vector<float> out_lse(lse.size());
  const void* parts_o[] = {o.data(), o.data()};
  const float* parts_lse[] = {lse.data(), lse.data()};
  ASSERT_EQ(attune_merge_states(rt, ATTUNE_DTYPE_BF16, rows, heads, dim, 1, parts_o, parts_lse, out.data(),
                                out_lse.data(), nullptr),
            ATTUNE_OK)
      << attune_last_error();
  EXPECT_EQ(out, o);
  for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(out_lse[i], lse[i], 1e-5) << i;
  // The same partial twice: the same O, LSE + ln 2.
  ASSERT_EQ(attune_merge_states(rt, ATTUNE_DTYPE_BF16, rows, heads, dim, 2, parts_o, parts_lse, out.data(),
                                out_lse.data(), nullptr),
            ATTUNE_OK);
  EXPECT_EQ(out, o);
  for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(out_lse[i], lse[i] + std::log(2.0F), 1e-5) << i;
  EXPECT_EQ(
      attune_merge_states(rt, ATTUNE_DTYPE_BF16, rows, heads, dim, 0, parts_o, parts_lse, out.data(), nullptr, nullptr),
      ATTUNE_ERROR_INVALID_ARGUMENT);
  attune_runtime_destroy(rt);
}

// The default runtime dispatches from the tuning database `attune tune`
// writes (the CLI's default path, here $ATTUNE_TUNING_DB), and explains
// decode and backward choices too; tuning_db "" turns it off.
// The append's device-side bounds (lengths the host never saw): a key past
// its row and a page outside the pool are never written; the page is
// reported. The lengths after the append are written for every sequence.
TEST(CApiTest, AppendWritesNewKeysAndNeverPastARowOrThePool) {
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  constexpr int64_t kBatch = 3, kPage = 4, kPages = 4, kDim = 16, kNew = 2;
  attune_append_problem p{};
  p.dtype = ATTUNE_DTYPE_BF16;
  p.batch = kBatch;
  p.seqlen_new = kNew;
  p.heads_kv = 1;
  p.head_dim_k = p.head_dim_v = kDim;
  for (int64_t* s : {p.k_new_strides, p.v_new_strides}) {
    s[0] = kNew * kDim, s[1] = kDim, s[2] = kDim;
  }
  p.page_size = kPage;
  p.num_pages = kPages;
  p.max_pages = 2;
  for (int64_t* s : {p.k_cache_strides, p.v_cache_strides}) {
    s[0] = kPage * kDim, s[1] = kDim, s[2] = kDim;
  }
  std::vector<std::uint16_t> k_new(kBatch * kNew * kDim), v_new(k_new.size());
  for (std::size_t i = 0; i < k_new.size(); ++i) {
    k_new[i] = float_to_bfloat16_bits(static_cast<float>(i + 1));
    v_new[i] = float_to_bfloat16_bits(-static_cast<float>(i + 1));
  }
  std::vector<std::uint16_t> k_cache(kPages * kPage * kDim, 0), v_cache(k_cache.size(), 0);
  // Sequence 0 appends at 3..4 (pages 0 and 1); sequence 1 at 7..8, past its
  // 8 keys for key 8; sequence 2 at 4..5, on a page outside the pool.
  const std::vector<std::int32_t> lens = {3, 7, 4}, table = {0, 1, 2, 3, 3, 9};
  std::vector<std::int32_t> after(kBatch, -1);
  const attune_append_buffers b{k_new.data(), v_new.data(), k_cache.data(), v_cache.data(), nullptr,     nullptr,
                                nullptr,      nullptr,      lens.data(),    after.data(),   table.data()};
  attune_bounds_report(1);
  ASSERT_EQ(attune_append_kv(rt, &p, &b, nullptr), ATTUNE_OK) << attune_last_error();
  EXPECT_EQ(after, (std::vector<std::int32_t>{5, 9, 6}));
  const auto key = [&](int page, int row) { return bfloat16_bits_to_float(k_cache[(page * kPage + row) * kDim]); };
  const auto new_key = [&](int seq, int t) { return static_cast<float>((seq * kNew + t) * kDim + 1); };
  EXPECT_EQ(key(0, 3), new_key(0, 0));
  EXPECT_EQ(key(1, 0), new_key(0, 1));
  EXPECT_EQ(key(3, 3), new_key(1, 0));  // position 7: the last of its row
  int written = 0;
  for (std::uint16_t bits : k_cache) written += bits != 0 ? 1 : 0;
  EXPECT_EQ(written, 3 * kDim) << "only the three keys inside their rows and the pool are written";
  EXPECT_NE(std::string(attune_bounds_report(1)).find("block_table[2, 1] = 9"), std::string::npos);

  p.rotary_dim = 24;  // not a multiple of 16
  EXPECT_EQ(attune_append_kv(rt, &p, &b, nullptr), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("append rotary dim (2 x rotary_cos.shape[1]): got 24"),
            std::string::npos)
      << attune_last_error();
  attune_runtime_destroy(rt);
}

TEST(CApiTest, TheDefaultRuntimeUsesTheTuningDatabaseTheCliWrote) {
  const std::string db = ::testing::TempDir() + "attune_c_api_tuned_" + std::to_string(::getpid()) + ".db";
  std::remove(db.c_str());
  ASSERT_EQ(setenv("ATTUNE_TUNING_DB", db.c_str(), 1), 0);
  const std::string tune = std::string(ATTUNE_CLI) +
                           " tune --backend emu --dtypes bf16 --head-dims 32 --masks none --seqlens 64 "
                           "--batch-heads 1x2 --max-variants 2 --repetitions 1 --quiet > /dev/null 2>&1";
  ASSERT_EQ(std::system(tune.c_str()), 0) << tune;
  attune_problem p;
  attune_problem_init(&p);
  p.heads_q = 2;
  p.heads_kv = 2;
  p.seqlen_q = 64;
  p.seqlen_k = 64;
  p.head_dim_k = 32;
  p.head_dim_v = 32;
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  const std::string tuned = attune_explain(rt, &p);
  EXPECT_NE(tuned.find("(tuned"), std::string::npos) << tuned;
  const char* decode = attune_explain_decode(rt, &p, 2);
  ASSERT_NE(decode, nullptr) << attune_last_error();
  EXPECT_NE(std::string(decode).find("flash_decode/"), std::string::npos) << decode;
  EXPECT_NE(std::string(decode).find("2 splits"), std::string::npos) << decode;
  const char* backward = attune_explain_backward(rt, &p, 1);
  ASSERT_NE(backward, nullptr) << attune_last_error();
  // The emulator is an sm_90a device: the Hopper backward, its deterministic (at0) twin.
  EXPECT_NE(std::string(backward).find("flash_bwd_sm90/"), std::string::npos) << backward;
  EXPECT_NE(std::string(backward).find(".at0"), std::string::npos) << backward;
  attune_runtime_destroy(rt);
  attune_runtime_options ro;
  attune_runtime_options_init(&ro);
  ro.backend = "emu";
  ro.tuning_db = "";
  ASSERT_EQ(attune_runtime_create_with(&ro, &rt), ATTUNE_OK) << attune_last_error();
  EXPECT_NE(std::string(attune_explain(rt, &p)).find("(heuristic"), std::string::npos) << attune_explain(rt, &p);
  attune_runtime_destroy(rt);
  unsetenv("ATTUNE_TUNING_DB");
  std::remove(db.c_str());
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
  attune_problem p = c_problem_of(ref);
  EXPECT_EQ(p.softcap, 0.0);  // attune_problem_init's defaults: no modifiers
  EXPECT_EQ(p.sinks, nullptr);
  p.seqlens_k = ref.seqlens_k.data();
  p.block_table = ref.block_table.data();
  p.softcap = 3.0;
  p.sinks = sinks.data();
  p.alibi_slopes = slopes.data();
  p.alibi_per_batch = 1;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(ref)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(ref)));
  const ModifierTensors tensors{sinks.data(), slopes.data()};
  for (int splits : {1, 3}) ASSERT_NO_FATAL_FAILURE(expect_accurate_decode(rt, p, splits, in, ref, tensors));
  const char* explained = attune_explain(rt, &p);
  ASSERT_NE(explained, nullptr);
  EXPECT_NE(std::string(explained).find(".softcap1.sinks1.alibi1"), std::string::npos) << explained;
  p.softcap = -2.0;
  EXPECT_EQ(attune_decode(rt, &p, 1, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("softcap: got -2"), std::string::npos) << attune_last_error();
  attune_runtime_destroy(rt);
}

// Dropout through attune_problem (p, seed, offset) and attune_buffers'
// rng_state: the emulator's forward keeps what the reference keeps (it
// draws the same mask), a plan run with the state in backend memory equals
// the convenience call with it in the problem, and another offset drops
// other elements.
TEST(CApiTest, DropoutTravelsInTheProblemAndTheBuffers) {
  attune_runtime* rt = nullptr;
  ASSERT_EQ(attune_runtime_create("emu", 0, &rt), ATTUNE_OK) << attune_last_error();
  attune_problem p;
  attune_problem_init(&p);
  EXPECT_EQ(p.dropout_p, 0.0);  // attune_problem_init's default: no dropout
  p.batch = 2;
  p.seqlen_q = 24;
  p.seqlen_k = 40;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.head_dim_k = 32;
  p.head_dim_v = 32;
  p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
  p.dropout_p = 0.3;
  p.seed = 0x1234567890ABCDEFULL;
  p.offset = 7;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  const auto random_bits = [&](std::size_t n) {
    std::vector<std::uint16_t> bits(n);
    for (auto& b : bits) b = float_to_bits(DType::kBF16, normal(gen));
    return bits;
  };
  const std::vector<std::uint16_t> q = random_bits(2 * 24 * 2 * 32), k = random_bits(2 * 40 * 32),
                                   v = random_bits(2 * 40 * 32);
  const auto as_double = [](const std::vector<std::uint16_t>& bits) {
    std::vector<double> out;
    for (std::uint16_t b : bits) out.push_back(bits_to_float(DType::kBF16, b));
    return out;
  };
  const std::vector<double> q64 = as_double(q), k64 = as_double(k), v64 = as_double(v);
  const auto reference_of = [&](const attune_problem& problem) {
    std::vector<double> o(q.size());
    EXPECT_EQ(attune_reference_forward(&problem, q64.data(), k64.data(), v64.data(), o.data(), nullptr), ATTUNE_OK)
        << attune_last_error();
    return o;
  };
  const auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
  };
  std::vector<std::uint16_t> o(q.size());
  std::vector<float> lse(2 * 2 * 24);
  ASSERT_EQ(attune_forward(rt, &p, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr), ATTUNE_OK)
      << attune_last_error();
  const std::vector<double> want = reference_of(p);
  EXPECT_LT(max_diff(as_double(o), want), 0.05) << "the emulator drops what the reference drops";
  attune_problem other = p;
  other.offset = 8;
  EXPECT_GT(max_diff(want, reference_of(other)), 0.1) << "another offset, another mask";
  attune_problem plain = p;
  plain.dropout_p = 0;
  EXPECT_GT(max_diff(want, reference_of(plain)), 0.1) << "dropout changes the output";

  // A plan run reads {seed, offset} from the buffers, in place of the problem's.
  attune_problem planned = p;
  planned.seed = 0;
  planned.offset = 0;
  attune_plan* plan = nullptr;
  ASSERT_EQ(attune_plan_create(rt, &planned, nullptr, &plan), ATTUNE_OK) << attune_last_error();
  std::size_t bytes = 0;
  ASSERT_EQ(attune_plan_workspace_size(plan, &bytes), ATTUNE_OK);
  std::vector<float> workspace((bytes + 3) / 4 + 4);
  const std::uint64_t state[2] = {p.seed, p.offset};
  std::vector<std::uint16_t> o_run(q.size());
  attune_buffers b{};
  b.q = q.data();
  b.k = k.data();
  b.v = v.data();
  b.o = o_run.data();
  b.lse = lse.data();
  b.rng_state = state;
  ASSERT_EQ(attune_plan_run(rt, plan, &b, nullptr, bytes ? workspace.data() : nullptr, bytes, nullptr), ATTUNE_OK)
      << attune_last_error();
  EXPECT_EQ(o_run, o) << "rng_state {seed, offset} = the problem's seed and offset";
  attune_plan_destroy(plan);

  p.dropout_p = 1.0;
  EXPECT_EQ(attune_forward(rt, &p, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr),
            ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("dropout_p: got 1"), std::string::npos) << attune_last_error();
  attune_runtime_destroy(rt);
}

// The host keep mask is templates/dropout.h's decision at every position.
TEST(CApiTest, TheKeepMaskIsTheKernelsDecision) {
  constexpr int64_t kBatch = 2, kHeads = 3, kRows = 19, kKeys = 21;
  std::vector<std::uint8_t> keep(kBatch * kHeads * kRows * kKeys, 7);
  ASSERT_EQ(attune_dropout_keep_mask(0.4, 99, 3, kBatch, kHeads, kRows, kKeys, keep.data()), ATTUNE_OK)
      << attune_last_error();
  const DropoutParams d = dropout_params(0.4, 99, 3);
  std::size_t at = 0, kept = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kRows; ++i) {
        for (int64_t j = 0; j < kKeys; ++j, ++at) {
          ASSERT_EQ(keep[at], dropout_keeps(d, b, h, kHeads, i, j) ? 1 : 0) << b << " " << h << " " << i << " " << j;
          kept += keep[at];
        }
      }
    }
  }
  EXPECT_GT(kept, 0U);
  EXPECT_LT(kept, keep.size());
  EXPECT_EQ(attune_dropout_keep_mask(1.0, 0, 0, 1, 1, 1, 1, keep.data()), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("dropout_p: got 1; expected a probability in [0, 1)"),
            std::string::npos)
      << attune_last_error();
  EXPECT_EQ(attune_dropout_keep_mask(0.5, 0, 0, 1, -2, 1, 1, keep.data()), ATTUNE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attune_last_error()).find("heads_q got -2"), std::string::npos) << attune_last_error();
  EXPECT_EQ(attune_dropout_keep_mask(0.5, 0, 0, 1, 1, 2, 2, nullptr), ATTUNE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace attune
