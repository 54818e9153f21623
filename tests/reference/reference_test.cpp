// The fp64 reference against closed forms and against a second, naive
// formulation (a dense mask matrix from the contract's formulas).
#include "reference/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/support/families.h"

namespace attune {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The contract's visibility rule, written directly as a predicate on (i, j).
bool contract_visible(const Mask& m, int64_t i, int64_t j, int64_t sq, int64_t sk) {
  const int64_t d = i + sk - sq;
  switch (m.kind) {
    case MaskKind::kNone:
      return true;
    case MaskKind::kCausalBottomRight:
      return j <= d;
    case MaskKind::kCausalTopLeft:
      return j <= i;
    case MaskKind::kSlidingWindow:
      return (m.window_left < 0 || j >= d - m.window_left) && (m.window_right < 0 || j <= d + m.window_right);
  }
  return false;
}

// Naive attention: a full score row with -inf where masked, then softmax.
ReferenceOutput mask_matrix_attention(const testing::Inputs& in) {
  const AttentionProblem& p = in.problem;
  const auto f = [&](const std::vector<std::uint16_t>& t, int64_t off) {
    return static_cast<double>(bits_to_float(p.dtype, t[static_cast<std::size_t>(off)]));
  };
  ReferenceOutput out;
  const int64_t batches = p.is_packed() ? 1 : p.batch;
  out.o.assign(static_cast<std::size_t>(batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(static_cast<std::size_t>(batches * p.heads_q * p.seqlen_q), -kInf);
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    const int64_t sk_full =
        p.is_packed() ? p.cu_seqlens_k[static_cast<std::size_t>(b) + 1] - p.cu_seqlens_k[static_cast<std::size_t>(b)]
                      : p.seqlen_k;
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        std::vector<double> scores(static_cast<std::size_t>(sk_full), -kInf);
        double max_score = -kInf;
        for (int64_t j = 0; j < sk_full; ++j) {
          if (j >= s.k_len || !contract_visible(p.mask, i, j, s.q_len, s.k_len)) continue;
          double dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += f(in.q, element_offset(p.q_strides, b, s.q_begin + i, h) + d) *
                   f(in.k, element_offset(p.k_strides, b, s.k_begin + j, h / p.group_size()) + d);
          }
          scores[static_cast<std::size_t>(j)] = p.softmax_scale() * dot;
          max_score = std::max(max_score, scores[static_cast<std::size_t>(j)]);
        }
        if (max_score == -kInf) continue;
        double total = 0;
        for (double x : scores) total += std::exp(x - max_score);
        const int64_t row = s.q_begin + i;
        for (int64_t j = 0; j < sk_full; ++j) {
          const double w = std::exp(scores[static_cast<std::size_t>(j)] - max_score) / total;
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            out.o[static_cast<std::size_t>(reference_o_index(p, b, row, h) + d)] +=
                w == 0 ? 0 : w * f(in.v, element_offset(p.v_strides, b, s.k_begin + j, h / p.group_size()) + d);
          }
        }
        out.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))] = max_score + std::log(total);
      }
    }
  }
  return out;
}

void expect_close(const ReferenceOutput& got, const ReferenceOutput& want, double tol, const std::string& name) {
  ASSERT_EQ(got.o.size(), want.o.size()) << name;
  ASSERT_EQ(got.lse.size(), want.lse.size()) << name;
  for (std::size_t i = 0; i < got.o.size(); ++i) {
    ASSERT_FALSE(std::isnan(got.o[i])) << name << " O[" << i << "]";
    ASSERT_NEAR(got.o[i], want.o[i], tol * (1 + std::abs(want.o[i]))) << name << " O[" << i << "]";
  }
  for (std::size_t i = 0; i < got.lse.size(); ++i) {
    ASSERT_FALSE(std::isnan(got.lse[i])) << name << " LSE[" << i << "]";
    if (std::isinf(want.lse[i])) {
      ASSERT_EQ(got.lse[i], want.lse[i]) << name << " LSE[" << i << "]";
    } else {
      ASSERT_NEAR(got.lse[i], want.lse[i], tol * (1 + std::abs(want.lse[i]))) << name << " LSE[" << i << "]";
    }
  }
}

ReferenceOutput run(const testing::Inputs& in) {
  return reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
}

TEST(ReferenceTest, MatchesMaskMatrixOnAllFamilies) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const testing::Family& family : testing::seed_families(dtype)) {
      const testing::Inputs in = testing::make_inputs(family);
      expect_close(run(in), mask_matrix_attention(in), 1e-12, family.name + "/" + std::string(to_string(dtype)));
    }
  }
}

TEST(ReferenceTest, EmptyRowsAreZeroWithMinusInfLse) {
  // Sq > Sk under bottom-right causal: rows 0..2 of 5 see nothing.
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[3]);
  ASSERT_EQ(in.problem.seqlen_q, 5);
  const ReferenceOutput out = run(in);
  for (int64_t i = 0; i < 5; ++i) {
    const bool empty = i < 3;
    EXPECT_EQ(out.lse[static_cast<std::size_t>(i)] == -kInf, empty) << "row " << i;
    if (empty) {
      EXPECT_EQ(out.o[static_cast<std::size_t>(i)], 0.0) << "row " << i;
    }
  }
  // Sk = 0: every row is empty.
  const AttentionProblem none = make_problem(std::vector<int64_t>{1, 3, 1, 4}, std::vector<int64_t>{1, 0, 1, 4},
                                             std::vector<int64_t>{1, 0, 1, 2}, {});
  const std::uint16_t q[12] = {};
  const ReferenceOutput empty = reference_forward(none, q, q, q);
  for (double x : empty.o) EXPECT_EQ(x, 0.0);
  for (double x : empty.lse) EXPECT_EQ(x, -kInf);
}

TEST(ReferenceTest, SingleKeyReturnsItsValue) {
  const AttentionProblem p = make_problem(std::vector<int64_t>{1, 2, 1, 2}, std::vector<int64_t>{1, 1, 1, 2},
                                          std::vector<int64_t>{1, 1, 1, 3}, {.scale = 0.5});
  const double q[] = {1, 2, 3, 4};
  const double k[] = {5, -1};
  const double v[] = {0.25, -7, 3};
  const ReferenceOutput out = reference_forward(p, q, k, v);
  EXPECT_EQ(out.o, (std::vector<double>{0.25, -7, 3, 0.25, -7, 3}));
  EXPECT_DOUBLE_EQ(out.lse[0], 0.5 * (5 - 2));
  EXPECT_DOUBLE_EQ(out.lse[1], 0.5 * (15 - 4));
}

TEST(ReferenceTest, UniformLogitsAverageTheVisibleValues) {
  // q = 0: every visible key weighs the same; causal row i averages v_0..v_i.
  const AttentionProblem p = make_problem(std::vector<int64_t>{1, 4, 1, 3}, std::vector<int64_t>{1, 4, 1, 3},
                                          std::vector<int64_t>{1, 4, 1, 1}, {.mask = Mask::causal_top_left()});
  const std::vector<double> q(12, 0.0);
  const std::vector<double> k(12, 0.5);
  const double v[] = {1, 2, 3, 4};
  const ReferenceOutput out = reference_forward(p, q.data(), k.data(), v);
  EXPECT_DOUBLE_EQ(out.o[0], 1.0);
  EXPECT_DOUBLE_EQ(out.o[1], 1.5);
  EXPECT_DOUBLE_EQ(out.o[2], 2.0);
  EXPECT_DOUBLE_EQ(out.o[3], 2.5);
  EXPECT_DOUBLE_EQ(out.lse[3], std::log(4.0));
}

TEST(ReferenceTest, CommonLogitShiftMovesOnlyLse) {
  // An extra dimension with q = c / scale and k = 1 adds c to every logit.
  const int64_t sq = 3;
  const int64_t sk = 5;
  const ProblemOptions base{.scale = 0.5};
  const AttentionProblem p = make_problem(std::vector<int64_t>{1, sq, 1, 3}, std::vector<int64_t>{1, sk, 1, 3},
                                          std::vector<int64_t>{1, sk, 1, 2}, base);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::vector<double> q(sq * 3), k(sk * 3), v(sk * 2);
  for (auto* t : {&q, &k, &v}) {
    for (double& x : *t) x = normal(rng);
  }
  for (int64_t i = 0; i < sq; ++i) q[i * 3 + 2] = 0;
  for (int64_t j = 0; j < sk; ++j) k[j * 3 + 2] = 1;
  const ReferenceOutput plain = reference_forward(p, q.data(), k.data(), v.data());
  for (double shift : {1000.0, -1000.0, 1e6}) {
    std::vector<double> shifted = q;
    for (int64_t i = 0; i < sq; ++i) shifted[i * 3 + 2] = shift / 0.5;
    const ReferenceOutput out = reference_forward(p, shifted.data(), k.data(), v.data());
    for (std::size_t i = 0; i < out.o.size(); ++i) EXPECT_NEAR(out.o[i], plain.o[i], 1e-9) << shift;
    for (std::size_t i = 0; i < out.lse.size(); ++i) {
      EXPECT_NEAR(out.lse[i], plain.lse[i] + shift, 1e-9 * std::abs(shift)) << shift;
    }
  }
}

TEST(ReferenceTest, StridedInputsMatchContiguous) {
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[11]);  // GQA
  const AttentionProblem& p = in.problem;
  // Q with padded heads and rows: copy into a larger buffer.
  AttentionProblem strided = p;
  strided.q_strides = {.batch = p.seqlen_q * 200, .seq = 200, .head = 16};
  std::vector<std::uint16_t> q(static_cast<std::size_t>(q_extent(strided)), 0xFFFF);  // NaN padding
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t d = 0; d < p.head_dim_k; ++d)
          q[static_cast<std::size_t>(element_offset(strided.q_strides, b, i, h) + d)] =
              in.q[static_cast<std::size_t>(element_offset(p.q_strides, b, i, h) + d)];
  const ReferenceOutput want = run(in);
  const ReferenceOutput got = reference_forward(strided, q.data(), in.k.data(), in.v.data());
  expect_close(got, want, 0.0, "strided");
}

TEST(ReferenceTest, GqaEqualsRepeatedKvHeads) {
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[11]);  // Hq 6, Hkv 2
  const AttentionProblem& p = in.problem;
  ASSERT_EQ(p.group_size(), 3);
  AttentionProblem mha = p;
  mha.heads_kv = p.heads_q;
  set_contiguous_strides(mha);
  std::vector<std::uint16_t> k(static_cast<std::size_t>(k_extent(mha))), v(static_cast<std::size_t>(v_extent(mha)));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < p.seqlen_k; ++j)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        for (int64_t d = 0; d < p.head_dim_k; ++d)
          k[static_cast<std::size_t>(element_offset(mha.k_strides, b, j, h) + d)] =
              in.k[static_cast<std::size_t>(element_offset(p.k_strides, b, j, h / 3) + d)];
        for (int64_t d = 0; d < p.head_dim_v; ++d)
          v[static_cast<std::size_t>(element_offset(mha.v_strides, b, j, h) + d)] =
              in.v[static_cast<std::size_t>(element_offset(p.v_strides, b, j, h / 3) + d)];
      }
  expect_close(reference_forward(mha, in.q.data(), k.data(), v.data()), run(in), 0.0, "gqa");
}

TEST(ReferenceTest, PackedEqualsEachSequenceAlone) {
  for (const testing::Family& family : testing::seed_families()) {
    if (family.options.cu_seqlens_q.empty()) continue;
    const testing::Inputs in = testing::make_inputs(family);
    const AttentionProblem& p = in.problem;
    const ReferenceOutput packed = run(in);
    for (int64_t b = 0; b < p.batch; ++b) {
      const SequenceExtent s = p.sequence(b);
      ProblemOptions one{.dtype = p.dtype, .mask = p.mask};
      const AttentionProblem dense = make_problem(std::vector<int64_t>{1, s.q_len, p.heads_q, p.head_dim_k},
                                                  std::vector<int64_t>{1, s.k_len, p.heads_kv, p.head_dim_k},
                                                  std::vector<int64_t>{1, s.k_len, p.heads_kv, p.head_dim_v}, one);
      const ReferenceOutput alone = reference_forward(dense, in.q.data() + element_offset(p.q_strides, 0, s.q_begin, 0),
                                                      in.k.data() + element_offset(p.k_strides, 0, s.k_begin, 0),
                                                      in.v.data() + element_offset(p.v_strides, 0, s.k_begin, 0));
      for (int64_t i = 0; i < s.q_len; ++i)
        for (int64_t h = 0; h < p.heads_q; ++h) {
          EXPECT_EQ(packed.lse[static_cast<std::size_t>(reference_lse_index(p, b, s.q_begin + i, h))],
                    alone.lse[static_cast<std::size_t>(reference_lse_index(dense, 0, i, h))])
              << family.name;
          for (int64_t d = 0; d < p.head_dim_v; ++d)
            EXPECT_EQ(packed.o[static_cast<std::size_t>(reference_o_index(p, b, s.q_begin + i, h) + d)],
                      alone.o[static_cast<std::size_t>(reference_o_index(dense, 0, i, h) + d)])
                << family.name;
        }
    }
  }
}

TEST(ReferenceTest, LargeLogitsStayFinite) {
  for (const testing::Family& family : testing::seed_families()) {
    if (family.input_shift == 0 && family.input_spread <= 1) continue;
    const ReferenceOutput out = run(testing::make_inputs(family));
    for (double x : out.o) ASSERT_TRUE(std::isfinite(x)) << family.name;
    for (double x : out.lse) ASSERT_TRUE(std::isfinite(x)) << family.name;
    EXPECT_GT(*std::max_element(out.lse.begin(), out.lse.end()), 100.0) << family.name;
  }
}

}  // namespace
}  // namespace attune
