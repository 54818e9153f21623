// Every validation rule of the operator contract, fed the bad input it must
// reject, with the message checked for what was wrong and what was expected.
#include "core/problem.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace attune {
namespace {

using Shape = std::vector<int64_t>;

AttentionProblem dense(Shape q, Shape k, Shape v, ProblemOptions options = {}) {
  return make_problem(q, k, v, std::move(options));
}

// Runs `action`, expects InvalidArgument, and checks the message holds each
// of `fragments`.
template <typename Action>
void expect_rejected(Action action, std::initializer_list<std::string> fragments) {
  try {
    action();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message << "\nmissing: " << fragment;
    }
  }
}

AttentionProblem valid_problem() { return dense({2, 5, 4, 8}, {2, 7, 2, 8}, {2, 7, 2, 6}); }

TEST(ProblemTest, ValidProblemHasContiguousStrides) {
  const AttentionProblem p = valid_problem();
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.group_size(), 2);
  EXPECT_EQ(p.kv_head_of(3), 1);
  EXPECT_EQ(p.q_strides, (TensorStrides{.batch = 5 * 4 * 8, .seq = 4 * 8, .head = 8}));
  EXPECT_EQ(p.v_strides, (TensorStrides{.batch = 7 * 2 * 6, .seq = 2 * 6, .head = 6}));
  EXPECT_EQ(p.lse_strides, (TensorStrides{.batch = 4 * 5, .seq = 1, .head = 5}));
  EXPECT_DOUBLE_EQ(p.softmax_scale(), 1.0 / std::sqrt(8.0));
  EXPECT_EQ(q_extent(p), 2 * 5 * 4 * 8);
  EXPECT_EQ(lse_extent(p), 2 * 4 * 5);
}

TEST(ProblemTest, RejectsMismatchedShapes) {
  expect_rejected([] { dense({1, 5, 2, 8}, {1, 7, 2, 4}, {1, 7, 2, 4}); }, {"head dim of Q and K", "Dk"});
  expect_rejected([] { dense({1, 5, 2, 8}, {1, 7, 2, 8}, {1, 6, 2, 8}); }, {"key count", "Sk"});
  expect_rejected([] { dense({2, 5, 2, 8}, {1, 7, 2, 8}, {1, 7, 2, 8}); }, {"batch size", "Q 2, K 1"});
  expect_rejected([] { dense({1, 5, 2, 8}, {1, 7, 2, 8}, {1, 7, 1, 8}); }, {"kv heads", "Hkv"});
  expect_rejected([] { dense({1, 5, 8}, {1, 7, 2, 8}, {1, 7, 2, 8}); }, {"Q shape", "rank 3", "expected rank 4"});
}

TEST(ProblemTest, RejectsHeadsNotAMultiple) {
  expect_rejected([] { dense({1, 5, 3, 8}, {1, 7, 2, 8}, {1, 7, 2, 8}); }, {"Hq = 3", "Hkv = 2", "multiple of Hkv"});
}

TEST(ProblemTest, RejectsHeadDimsOutsideRange) {
  expect_rejected([] { dense({1, 5, 1, 0}, {1, 7, 1, 0}, {1, 7, 1, 8}); }, {"head dim Dk", "got 0", "1 <= Dk <= 256"});
  expect_rejected([] { dense({1, 5, 1, 257}, {1, 7, 1, 257}, {1, 7, 1, 8}); }, {"Dk", "got 257"});
  expect_rejected([] { dense({1, 5, 1, 8}, {1, 7, 1, 8}, {1, 7, 1, 300}); }, {"head dim Dv", "got 300", "Dv <= 256"});
  // The bounds themselves are valid.
  EXPECT_NO_THROW(dense({1, 2, 1, 1}, {1, 2, 1, 1}, {1, 2, 1, 256}));
}

TEST(ProblemTest, RejectsNegativeLengths) {
  expect_rejected([] { dense({1, -5, 1, 8}, {1, 7, 1, 8}, {1, 7, 1, 8}); }, {"Q shape", "non-negative"});
  AttentionProblem p = valid_problem();
  p.seqlen_k = -1;
  expect_rejected([&] { validate(p); }, {"key length Sk", "got -1", "Sk >= 0"});
  p = valid_problem();
  p.seqlens_k = {3, -2};
  expect_rejected([&] { validate(p); }, {"seqlens_k[1]", "got -2", "non-negative"});
}

TEST(ProblemTest, RejectsSeqlensKAboveSk) {
  expect_rejected(
      [] {
        dense({2, 5, 1, 8}, {2, 7, 1, 8}, {2, 7, 1, 8}, {.seqlens_k = {7, 8}});
      },
      {"seqlens_k[1]", "got 8", "at most 7"});
  expect_rejected(
      [] {
        dense({2, 5, 1, 8}, {2, 7, 1, 8}, {2, 7, 1, 8}, {.seqlens_k = {7}});
      },
      {"seqlens_k length", "got 1", "one per batch"});
}

TEST(ProblemTest, RejectsBadCuSeqlens) {
  const Shape q = {10, 2, 8};
  const Shape k = {12, 2, 8};
  // Packed Q [10, 2, 8] over packed K and V [12, 2, 8] with `options`.
  const auto packed_rejected = [&](const ProblemOptions& options, std::initializer_list<std::string> fragments) {
    expect_rejected([&] { dense(q, k, k, options); }, fragments);
  };
  packed_rejected({.cu_seqlens_q = {1, 4, 10}, .cu_seqlens_k = {0, 6, 12}}, {"cu_seqlens_q[0]", "got 1", "expected 0"});
  packed_rejected({.cu_seqlens_q = {0, 4, 10}, .cu_seqlens_k = {0, 6, 5}}, {"cu_seqlens_k[2]", "non-decreasing"});
  packed_rejected({.cu_seqlens_q = {0, 4, 11}, .cu_seqlens_k = {0, 6, 12}},
                  {"cu_seqlens_q last entry", "got 11", "at most 10"});
  packed_rejected({.cu_seqlens_q = {0, 4, 10}, .cu_seqlens_k = {0, 12}},
                  {"cu_seqlens_k length", "got 2", "expected 3"});
  packed_rejected({.cu_seqlens_q = {0, 4, 10}}, {"K shape", "rank 4", "packed K needs cu_seqlens_k"});
  expect_rejected(
      [&] {
        dense({10, 2, 8}, {1, 12, 2, 8}, {1, 12, 2, 8}, {.cu_seqlens_k = {0, 12}});
      },
      {"cu_seqlens", "only cu_seqlens_k", "packed keys need packed queries"});
  // Packed queries over per-sequence keys [B, Sk, Hkv, D]: valid.
  const AttentionProblem over_keys =
      make_problem(q, Shape{2, 12, 2, 8}, Shape{2, 12, 2, 8}, {.seqlens_k = {12, 3}, .cu_seqlens_q = {0, 4, 10}});
  EXPECT_TRUE(over_keys.is_packed());
  EXPECT_FALSE(over_keys.has_packed_keys());
  EXPECT_EQ(over_keys.k_strides.batch, 12 * 2 * 8);
  EXPECT_EQ(over_keys.sequence(1).q_begin, 4);
  EXPECT_EQ(over_keys.sequence(1).k_len, 3);
  expect_rejected(
      [&] {
        dense({1, 10, 2, 8}, {1, 12, 2, 8}, {1, 12, 2, 8}, {.cu_seqlens_q = {0, 10}, .cu_seqlens_k = {0, 12}});
      },
      {"Q shape", "rank 4", "[T, H, D]"});
  // Packed key padding is bounded by each sequence's own keys.
  expect_rejected(
      [&] {
        dense(q, k, k, {.seqlens_k = {6, 7}, .cu_seqlens_q = {0, 4, 10}, .cu_seqlens_k = {0, 6, 12}});
      },
      {"seqlens_k[1]", "got 7", "at most 6"});
}

TEST(ProblemTest, PackedSequencesAreReadFromOffsets) {
  const Shape q = {10, 2, 8};
  const Shape k = {12, 2, 8};
  const AttentionProblem p = dense(q, k, k, {.cu_seqlens_q = {0, 4, 4, 10}, .cu_seqlens_k = {0, 6, 9, 12}});
  EXPECT_TRUE(p.is_packed());
  EXPECT_EQ(p.batch, 3);
  const SequenceExtent s = p.sequence(2);
  EXPECT_EQ(s.q_begin, 4);
  EXPECT_EQ(s.q_len, 6);
  EXPECT_EQ(s.k_begin, 9);
  EXPECT_EQ(s.k_len, 3);
  EXPECT_EQ(p.q_strides.batch, 0);
  EXPECT_EQ(p.lse_strides, (TensorStrides{.batch = 0, .seq = 1, .head = 10}));
}

TEST(ProblemTest, RejectsUnsupportedDtypeAndMask) {
  AttentionProblem p = valid_problem();
  p.dtype = static_cast<DType>(7);
  expect_rejected([&] { validate(p); }, {"dtype", "enum value 7", "fp16, bf16, e4m3 or e5m2"});
  // fp8 K and V: under 16-bit queries (a cache), or with fp8 queries of the same format.
  p = valid_problem();
  p.kv_dtype = DType::kF16;
  expect_rejected([&] { validate(p); }, {"kv dtype", "fp16 under bf16 queries", "e4m3 / e5m2"});
  p.dtype = DType::kE4M3;
  p.kv_dtype = DType::kE5M2;
  expect_rejected([&] { validate(p); }, {"kv dtype", "e5m2 under e4m3 queries", "queries' fp8 format"});
  p.kv_dtype = DType::kE4M3;
  EXPECT_NO_THROW(validate(p));
  EXPECT_EQ(p.compute_dtype(), DType::kBF16);
  EXPECT_NO_THROW(validate_backward(valid_problem()));
  expect_rejected([&] { validate_backward(p); }, {"backward dtype", "e4m3 Q", "fp16 or bf16"});
  p = valid_problem();
  p.mask = Mask::window(-2, 3);
  expect_rejected([&] { validate(p); }, {"window", "-2,3", "-1 for unbounded"});
  p = valid_problem();
  p.scale = std::numeric_limits<double>::infinity();
  expect_rejected([&] { validate(p); }, {"scale", "inf", "finite"});
}

// Found by fuzz/problem_fuzzer (docs/reliability.md): sizes and strides
// whose offsets overflow int64, and a scale beyond float's range, were
// accepted (strides wrapped around; the kernels' float scale was infinite).
TEST(ProblemTest, RejectsSizesAndStridesWhoseOffsetsOverflow) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  expect_rejected([&] { dense({1, kHuge, kHuge, 8}, {1, 4, 1, 8}, {1, 4, 1, 8}); }, {"overflows int64"});
  AttentionProblem p = valid_problem();
  p.q_strides.seq = std::numeric_limits<int64_t>::max() / 2;
  expect_rejected([&] { validate(p); }, {"tensor extent", "overflows int64"});
  p = valid_problem();
  p.seqlen_q = int64_t{1} << 31;
  expect_rejected([&] { validate(p); }, {"query length Sq", "2147483648", "int32"});
  p = valid_problem();
  p.scale = -1.79e308;
  expect_rejected([&] { validate(p); }, {"scale", "float range"});
  p = valid_problem();
  p.scale = 3.0e38;  // within float: fine
  EXPECT_NO_THROW(validate(p));
}

TEST(ProblemTest, RejectsBadStrides) {
  AttentionProblem p = valid_problem();
  p.k_strides.seq = -4;
  expect_rejected([&] { validate(p); }, {"K strides", "non-negative"});
  p = valid_problem();
  p.o_strides.head = 2;  // heads of 6 elements at a stride of 2 overlap
  expect_rejected([&] { validate(p); }, {"O strides", "never map two elements"});
  // Inputs may alias themselves (broadcast K over batches).
  p = valid_problem();
  p.k_strides.batch = 0;
  EXPECT_NO_THROW(validate(p));
}

struct Storage {
  std::vector<std::uint16_t> q, k, v, o;
  std::vector<float> lse;
  explicit Storage(const AttentionProblem& p)
      : q(static_cast<std::size_t>(q_extent(p))),
        k(static_cast<std::size_t>(k_extent(p))),
        v(static_cast<std::size_t>(v_extent(p))),
        o(static_cast<std::size_t>(o_extent(p))),
        lse(static_cast<std::size_t>(lse_extent(p))) {}
  AttentionBuffers buffers() { return {q.data(), k.data(), v.data(), o.data(), lse.data()}; }
};

TEST(ProblemTest, RejectsNullPointers) {
  const AttentionProblem p = valid_problem();
  Storage s(p);
  EXPECT_NO_THROW(validate(p, s.buffers()));
  for (int which = 0; which < 4; ++which) {
    AttentionBuffers b = s.buffers();
    const char* name = "";
    switch (which) {
      case 0:
        b.q = nullptr;
        name = "Q pointer";
        break;
      case 1:
        b.k = nullptr;
        name = "K pointer";
        break;
      case 2:
        b.v = nullptr;
        name = "V pointer";
        break;
      default:
        b.o = nullptr;
        name = "O pointer";
        break;
    }
    expect_rejected([&] { validate(p, b); }, {name, "null"});
  }
  AttentionBuffers no_lse = s.buffers();
  no_lse.lse = nullptr;  // LSE is optional
  EXPECT_NO_THROW(validate(p, no_lse));
}

TEST(ProblemTest, RejectsOutputsOverlappingInputs) {
  const AttentionProblem p = valid_problem();
  Storage s(p);
  AttentionBuffers b = s.buffers();
  b.o = s.v.data() + 4;  // O starts inside V
  expect_rejected([&] { validate(p, b); }, {"output O", "overlap with input V", "disjoint"});
  b = s.buffers();
  b.lse = reinterpret_cast<float*>(s.q.data() + s.q.size() - 2);  // LSE's first float is Q's last two halves
  expect_rejected([&] { validate(p, b); }, {"output LSE", "overlap with input Q"});
  b = s.buffers();
  b.lse = reinterpret_cast<float*>(s.o.data());
  expect_rejected([&] { validate(p, b); }, {"output O", "overlap with output LSE"});
  // Adjacent but disjoint buffers are fine.
  std::vector<std::uint16_t> joint(s.q.size() + s.o.size());
  b = s.buffers();
  b.q = joint.data();
  b.o = joint.data() + s.q.size();
  EXPECT_NO_THROW(validate(p, b));
}

// Paged KV caches: K and V are page pools, keys reached through a block table.
TEST(ProblemTest, PagedCacheSizesAndExtents) {
  // Two sequences, pages of 4 keys, 3 pages each, a pool of 7 pages.
  const AttentionProblem p = dense({2, 1, 4, 8}, {7, 4, 2, 8}, {7, 4, 2, 6},
                                   {.seqlens_k = {12, 5}, .block_table = {6, 0, 3, 2, 5, 1}, .page_size = 4});
  EXPECT_TRUE(p.is_paged());
  EXPECT_EQ(p.max_pages(), 3);
  EXPECT_EQ(p.seqlen_k, 12);  // max_pages x page_size
  EXPECT_EQ(p.num_pages, 7);
  EXPECT_EQ(p.k_strides.batch, 4 * 2 * 8);  // one page
  EXPECT_EQ(k_extent(p), 7 * 4 * 2 * 8);
  EXPECT_EQ(v_extent(p), 7 * 4 * 2 * 6);
}

TEST(ProblemTest, RejectsBadPagedCaches) {
  const Shape q = {2, 1, 4, 8}, pool_k = {7, 4, 2, 8}, pool_v = {7, 4, 2, 8};
  expect_rejected(
      [&] {
        dense(q, pool_k, pool_v, {.block_table = {6, 0, 3, 2, 5, 7}, .page_size = 4});
      },
      {"block_table[1, 2]", "got 7", "[0, 7)"});
  // Only the pages that hold keys are read, so only they are checked.
  EXPECT_NO_THROW(dense(q, pool_k, pool_v, {.seqlens_k = {12, 5}, .block_table = {6, 0, 3, 2, 5, -1}, .page_size = 4}));
  expect_rejected(
      [&] {
        dense(q, pool_k, pool_v, {.block_table = {6, 0, 3, 2, 5}, .page_size = 4});
      },
      {"block table", "B x max_pages"});
  expect_rejected(
      [&] {
        dense(q, pool_k, pool_v, {.block_table = {0, 1}, .page_size = 8});
      },
      {"K page pool", "page_size = 8"});
  expect_rejected([&] { dense(q, pool_k, pool_v, {.block_table = {0, 1}}); }, {"page size", "got 0"});
  expect_rejected(
      [&] {
        dense(q, pool_k, pool_v, {.seqlens_k = {13, 1}, .block_table = {0, 1, 2, 3, 4, 5}, .page_size = 4});
      },
      {"seqlens_k[0]", "at most 12", "max_pages x page_size"});
  expect_rejected(
      [&] {
        make_problem(Shape{4, 2, 8}, pool_k, pool_v,
                     {.cu_seqlens_q = {0, 4}, .cu_seqlens_k = {0, 4}, .block_table = {0}, .page_size = 4});
      },
      {"paged KV cache", "cu_seqlens_k given too", "keys in the pages only"});
  // Packed queries over a paged cache (mixed prefill and decode): valid.
  const AttentionProblem mixed =
      make_problem(Shape{4, 2, 8}, pool_k, pool_v, {.cu_seqlens_q = {0, 4}, .block_table = {0}, .page_size = 4});
  EXPECT_TRUE(mixed.is_packed() && mixed.is_paged());
  EXPECT_EQ(mixed.q_strides.batch, 0);
  EXPECT_EQ(mixed.k_strides.batch, 4 * 2 * 8);  // the page stride
}

TEST(ProblemTest, UnpagingGathersEachSequencesKeysInOrder) {
  // Pool element (page, row, head, d) holds 1000 page + 100 row + 10 head + d.
  const AttentionProblem p = dense({2, 1, 2, 3}, {5, 2, 2, 3}, {5, 2, 2, 3},
                                   {.seqlens_k = {3, 2}, .block_table = {4, 1, 0, 3}, .page_size = 2});
  std::vector<std::uint16_t> pool(static_cast<std::size_t>(k_extent(p)));
  for (int64_t page = 0; page < 5; ++page)
    for (int64_t row = 0; row < 2; ++row)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 3; ++d)
          pool[static_cast<std::size_t>(element_offset(p.k_strides, page, row, h) + d)] =
              static_cast<std::uint16_t>(1000 * page + 100 * row + 10 * h + d);
  const UnpagedKv c = unpage_kv(p, pool.data(), pool.data());
  EXPECT_FALSE(c.problem.is_paged());
  EXPECT_EQ(c.problem.seqlen_k, 4);
  const auto at = [&](int64_t b, int64_t j, int64_t h, int64_t d) {
    return c.k[static_cast<std::size_t>(element_offset(c.problem.k_strides, b, j, h) + d)];
  };
  EXPECT_EQ(at(0, 0, 1, 2), 4012);  // sequence 0: pages 4, 1
  EXPECT_EQ(at(0, 1, 0, 0), 4100);
  EXPECT_EQ(at(0, 2, 1, 1), 1011);
  EXPECT_EQ(at(0, 3, 0, 0), 0);    // past its 3 keys: zero
  EXPECT_EQ(at(1, 1, 0, 2), 102);  // sequence 1: page 0
  EXPECT_EQ(at(1, 2, 0, 0), 0);    // past its 2 keys (page 3 is never read)
}

TEST(MaskTest, VisibleKeysFollowGlobalPositions) {
  const auto range = [](const Mask& m, int64_t i, int64_t sq, int64_t sk) {
    const KeyRange r = visible_keys(m, i, sq, sk);
    return r.empty() ? std::pair<int64_t, int64_t>{0, 0} : std::pair{r.begin, r.end};
  };
  using R = std::pair<int64_t, int64_t>;
  EXPECT_EQ(range(Mask::none(), 3, 5, 9), (R{0, 9}));
  // Bottom-right: row i sees j <= i + Sk - Sq.
  EXPECT_EQ(range(Mask::causal_bottom_right(), 0, 2, 6), (R{0, 5}));
  EXPECT_EQ(range(Mask::causal_bottom_right(), 2, 5, 2), (R{0, 0}));  // empty prefix row
  EXPECT_EQ(range(Mask::causal_bottom_right(), 3, 5, 2), (R{0, 1}));
  // Top-left: row i sees j <= i.
  EXPECT_EQ(range(Mask::causal_top_left(), 2, 5, 8), (R{0, 3}));
  EXPECT_EQ(range(Mask::causal_top_left(), 7, 8, 5), (R{0, 5}));
  // Window around the bottom-right diagonal d = i + Sk - Sq.
  EXPECT_EQ(range(Mask::window(2, 1), 4, 9, 12), (R{5, 9}));  // d = 7
  EXPECT_EQ(range(Mask::window(-1, 0), 4, 9, 12), range(Mask::causal_bottom_right(), 4, 9, 12));
  EXPECT_EQ(range(Mask::window(0, 0), 0, 12, 9), (R{0, 0}));  // d = -3: nothing
  EXPECT_EQ(range(Mask::none(), 0, 1, 0), (R{0, 0}));         // Sk = 0
}

}  // namespace
}  // namespace attune
