// The fp64 reference against closed forms and against a second, naive
// formulation (a dense mask matrix from the contract's formulas); its score
// modifiers and dropout against the contract's "Score modifiers" and
// "Dropout" written directly.
#include "reference/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "templates/dropout.h"
#include "tests/support/error_of.h"
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

// ---- Score modifiers ----

std::size_t at(int64_t index) { return static_cast<std::size_t>(index); }

// Host values of a problem's modifiers: sinks [Hq], ALiBi slopes [Hq] or [B, Hq].
struct ModifierValuesHost {
  std::vector<float> sinks;
  std::vector<float> slopes;
  ModifierTensors tensors() const {
    return {.sinks = sinks.empty() ? nullptr : sinks.data(), .alibi_slopes = slopes.empty() ? nullptr : slopes.data()};
  }
};

ModifierValuesHost random_modifiers(const AttentionProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> sink(-1.0F, 2.5F);
  std::uniform_real_distribution<float> slope(0.05F, 0.7F);
  ModifierValuesHost m;
  if (p.modifiers.sinks) {
    for (int64_t h = 0; h < p.heads_q; ++h) m.sinks.push_back(sink(rng));
  }
  for (int64_t e = 0; e < alibi_extent(p); ++e) m.slopes.push_back(slope(rng));
  return m;
}

// fp64 Q, K and V in the problem's contiguous layout.
struct Values {
  std::vector<double> q, k, v;
};

Values random_values(const AttentionProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Values t{std::vector<double>(at(q_extent(p))), std::vector<double>(at(k_extent(p))),
           std::vector<double>(at(v_extent(p)))};
  for (auto* x : {&t.q, &t.k, &t.v}) {
    for (double& e : *x) e = normal(rng);
  }
  for (double& e : t.q) e *= 1.5;  // scores beyond the softcap
  return t;
}

// Mistakes the direct formula can be told to make, to prove the comparison
// catches them.
enum class Planted : std::uint8_t {
  kNone,
  kSoftcapAfterAlibi,
  kSinkDropped,
  kDropoutUnscaled,      // kept probabilities without the 1 / (1 - p)
  kDropoutRenormalized,  // Z summed over the kept keys only (LSE with dropout)
  kDropoutPackedRow,     // the packed row (q_begin + i) in place of the row within the sequence
};

// Whether the dropout the problem asks for keeps element (i, j) of sequence b
// in head h: the shared keep decision of templates/dropout.h.
bool kept_by_dropout(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const ScoreModifiers& m = p.modifiers;
  return dropout_keeps(dropout_params(m.dropout_p, m.seed, m.offset), b, h, p.heads_q, i, j);
}

// The contract's score modifiers written directly: for each row, every key of
// the sequence with the contract's visibility predicate, score x = scale q.k,
// c tanh(x / c), the ALiBi term, then Z = e^sink + sum e^s (no max shift:
// the inputs are small), O = sum e^s v / Z (0 when Z = 0), LSE = log Z.
// With dropout p ("Dropout"), the softmax's P = e^s / Z is then zeroed where
// dropped and divided by 1 - p where kept; Z and LSE do not change.
ReferenceOutput direct_modified_attention(const AttentionProblem& p, const Values& in, const ModifierValuesHost& m,
                                          Planted planted = Planted::kNone) {
  ReferenceOutput out;
  const int64_t batches = p.is_packed() ? 1 : p.batch;
  out.o.assign(at(batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(at(batches * p.heads_q * p.seqlen_q), -kInf);
  const double c = p.modifiers.softcap;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / p.group_size();
      double slope = 0;
      if (p.modifiers.alibi == AlibiSlopes::kPerHead) slope = m.slopes[at(h)];
      if (p.modifiers.alibi == AlibiSlopes::kPerBatchHead) slope = m.slopes[at(b * p.heads_q + h)];
      for (int64_t i = 0; i < s.q_len; ++i) {
        double z = p.modifiers.sinks && planted != Planted::kSinkDropped ? std::exp(double{m.sinks[at(h)]}) : 0.0;
        std::vector<double> numerator(at(p.head_dim_v), 0.0);
        for (int64_t j = 0; j < s.k_len; ++j) {
          if (!contract_visible(p.mask, i, j, s.q_len, s.k_len)) continue;
          double x = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            x += in.q[at(element_offset(p.q_strides, b, s.q_begin + i, h) + d)] *
                 in.k[at(element_offset(p.k_strides, b, s.k_begin + j, hk) + d)];
          }
          x *= p.softmax_scale();
          const double bias = -slope * std::abs(static_cast<double>(i + s.k_len - s.q_len - j));
          double score = 0;
          if (planted == Planted::kSoftcapAfterAlibi) {
            score = c > 0 ? c * std::tanh((x + bias) / c) : x + bias;
          } else {
            score = (c > 0 ? c * std::tanh(x / c) : x) + bias;
          }
          const double e = std::exp(score);
          double dropped = e;  // e^s after dropout
          if (p.modifiers.dropout()) {
            const int64_t mask_row = planted == Planted::kDropoutPackedRow ? s.q_begin + i : i;
            const bool keep = kept_by_dropout(p, b, h, mask_row, j);
            const double scale = planted == Planted::kDropoutUnscaled ? 1.0 : 1.0 / (1.0 - p.modifiers.dropout_p);
            dropped = keep ? e * scale : 0.0;
            if (planted != Planted::kDropoutRenormalized || keep) z += e;
          } else {
            z += e;
          }
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            numerator[at(d)] += dropped * in.v[at(element_offset(p.v_strides, b, s.k_begin + j, hk) + d)];
          }
        }
        const int64_t row = s.q_begin + i;
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          out.o[at(reference_o_index(p, b, row, h) + d)] = z > 0 ? numerator[at(d)] / z : 0.0;
        }
        out.lse[at(reference_lse_index(p, b, row, h))] = std::log(z);  // -inf for Z = 0
      }
    }
  }
  return out;
}

// Largest |got - want| / (1 + |want|); infinities must match exactly.
double max_error(const ReferenceOutput& got, const ReferenceOutput& want) {
  double worst = 0;
  const auto visit = [&](const std::vector<double>& g, const std::vector<double>& w) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (std::isinf(g[i]) || std::isinf(w[i])) {
        if (g[i] != w[i]) worst = kInf;
        continue;
      }
      worst = std::max(worst, std::isnan(g[i]) ? kInf : std::abs(g[i] - w[i]) / (1 + std::abs(w[i])));
    }
  };
  visit(got.o, want.o);
  visit(got.lse, want.lse);
  return worst;
}

struct ModifierCase {
  std::string name;
  ScoreModifiers modifiers;
};

std::vector<ModifierCase> modifier_sets() {
  return {
      {"softcap", {.softcap = 0.9}},
      {"sinks", {.sinks = true}},
      {"alibi", {.alibi = AlibiSlopes::kPerHead}},
      {"alibi_per_batch", {.alibi = AlibiSlopes::kPerBatchHead}},
      {"all", {.softcap = 0.9, .sinks = true, .alibi = AlibiSlopes::kPerHead}},
      {"all_per_batch", {.softcap = 1.7, .sinks = true, .alibi = AlibiSlopes::kPerBatchHead}},
      {"dropout", {.dropout_p = 0.17, .seed = 0x5EED0000DEADBEEFull, .offset = 12}},
      {"dropout_0.5_high_offset", {.dropout_p = 0.5, .seed = 7, .offset = (3ull << 32) + 4}},
      {"all_dropout",
       {.softcap = 0.9,
        .sinks = true,
        .alibi = AlibiSlopes::kPerBatchHead,
        .dropout_p = 0.3,
        .seed = 2024,
        .offset = 1ull << 40}},
  };
}

struct ShapeCase {
  std::string name;
  std::vector<int64_t> q_shape, k_shape, v_shape;
  ProblemOptions options;
};

// Irregular shapes (Sq 5, Sk 9, Hq 4 on Hkv 2, Dk 8, Dv 6) under every mask
// kind, tall ones with empty rows, key padding and packed variable length.
std::vector<ShapeCase> modifier_shapes() {
  const std::vector<int64_t> q{2, 5, 4, 8}, k{2, 9, 2, 8}, v{2, 9, 2, 6};
  const std::vector<int64_t> tall_q{2, 9, 4, 8}, tall_k{2, 5, 2, 8}, tall_v{2, 5, 2, 6};
  const std::vector<int64_t> packed_q{9, 4, 8}, packed_k{13, 2, 8}, packed_v{13, 2, 6};
  const std::vector<int32_t> cu_q{0, 3, 8, 9}, cu_k{0, 5, 7, 13};  // sequence 1: 5 queries on 2 keys
  return {
      {"none", q, k, v, {.mask = Mask::none()}},
      {"causal_bottom_right", q, k, v, {.mask = Mask::causal_bottom_right()}},
      {"causal_top_left", q, k, v, {.mask = Mask::causal_top_left()}},
      {"window_2_1", q, k, v, {.mask = Mask::window(2, 1)}},
      {"tall_causal_bottom_right", tall_q, tall_k, tall_v, {.mask = Mask::causal_bottom_right()}},
      {"tall_causal_top_left", tall_q, tall_k, tall_v, {.mask = Mask::causal_top_left()}},
      {"tall_window_1_0", tall_q, tall_k, tall_v, {.mask = Mask::window(1, 0)}},
      {"padded", q, k, v, {.seqlens_k = {4, 9}}},
      {"padded_causal", q, k, v, {.mask = Mask::causal_bottom_right(), .seqlens_k = {0, 6}}},
      {"packed", packed_q, packed_k, packed_v, {.scale = 0.4, .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k}},
      {"packed_causal",
       packed_q,
       packed_k,
       packed_v,
       {.mask = Mask::causal_bottom_right(), .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k}},
      {"packed_window_padded",
       packed_q,
       packed_k,
       packed_v,
       {.mask = Mask::window(1, 1), .seqlens_k = {4, 2, 5}, .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k}},
  };
}

TEST(ReferenceModifiersTest, MatchesTheDirectFormulaOnEveryMaskAndLayout) {
  unsigned seed = 1;
  for (const ShapeCase& shape : modifier_shapes()) {
    const AttentionProblem plain = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, shape.options);
    const Values in = random_values(plain, seed++);
    const ReferenceOutput unmodified = reference_forward(plain, in.q.data(), in.k.data(), in.v.data());
    // The direct formula without modifiers is the plain reference.
    EXPECT_LT(max_error(direct_modified_attention(plain, in, {}), unmodified), 1e-12) << shape.name;
    for (const ModifierCase& mods : modifier_sets()) {
      const std::string name = shape.name + "/" + mods.name;
      ProblemOptions options = shape.options;
      options.modifiers = mods.modifiers;
      const AttentionProblem p = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, options);
      const ModifierValuesHost m = random_modifiers(p, seed++);
      const ReferenceOutput got = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), m.tensors());
      expect_close(got, direct_modified_attention(p, in, m), 1e-12, name);
      // The modifier is in effect: the outputs move.
      EXPECT_GT(max_error(got, unmodified), 1e-3) << name;
    }
  }
}

TEST(ReferenceModifiersTest, EmptyRowsWithSinksAreZeroWithSinkLse) {
  // Sq 5 on Sk 2, bottom-right causal: rows 0..2 see no key.
  const AttentionProblem p =
      make_problem(std::vector<int64_t>{1, 5, 2, 4}, std::vector<int64_t>{1, 2, 1, 4}, std::vector<int64_t>{1, 2, 1, 3},
                   {.mask = Mask::causal_bottom_right(), .modifiers = {.sinks = true}});
  const Values in = random_values(p, 3);
  const std::vector<float> sinks = {0.75F, -1.3F};
  const ReferenceOutput out = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), {.sinks = sinks.data()});
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 5; ++i) {
      const double lse = out.lse[at(reference_lse_index(p, 0, i, h))];
      if (i < 3) {
        EXPECT_EQ(lse, double{sinks[at(h)]}) << "head " << h << " row " << i;
        for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(out.o[at(reference_o_index(p, 0, i, h) + d)], 0.0);
      } else {
        EXPECT_GT(lse, double{sinks[at(h)]}) << "head " << h << " row " << i;  // the sink plus its keys
      }
    }
  }
  // Sk = 0: every row is empty.
  const AttentionProblem keyless = make_problem(std::vector<int64_t>{1, 3, 2, 4}, std::vector<int64_t>{1, 0, 1, 4},
                                                std::vector<int64_t>{1, 0, 1, 2}, {.modifiers = {.sinks = true}});
  const double q[24] = {};
  const ReferenceOutput empty = reference_forward(keyless, q, q, q, {.sinks = sinks.data()});
  for (double x : empty.o) EXPECT_EQ(x, 0.0);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(empty.lse[at(reference_lse_index(keyless, 0, i, h))], sinks[at(h)]);
}

TEST(ReferenceModifiersTest, PerBatchSlopesIndexBatchThenHead) {
  const ShapeCase shape = modifier_shapes()[1];  // B 2, causal
  ProblemOptions per_head_options = shape.options;
  per_head_options.modifiers.alibi = AlibiSlopes::kPerHead;
  ProblemOptions per_batch_options = shape.options;
  per_batch_options.modifiers.alibi = AlibiSlopes::kPerBatchHead;
  const AttentionProblem per_head = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, per_head_options);
  const AttentionProblem per_batch = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, per_batch_options);
  ASSERT_EQ(alibi_extent(per_batch), 8);
  const Values in = random_values(per_head, 5);
  const std::vector<float> head_slopes = {0.5F, 0.25F, 0.125F, 0.0625F};
  std::vector<float> batch_slopes = head_slopes;
  batch_slopes.insert(batch_slopes.end(), head_slopes.begin(), head_slopes.end());
  const ReferenceOutput want =
      reference_forward(per_head, in.q.data(), in.k.data(), in.v.data(), {.alibi_slopes = head_slopes.data()});
  // [B, Hq] with every batch row the same: the per-head result exactly.
  expect_close(
      reference_forward(per_batch, in.q.data(), in.k.data(), in.v.data(), {.alibi_slopes = batch_slopes.data()}), want,
      0.0, "repeated rows");
  // Changing batch 1's slope of head 2 moves exactly that (batch, head).
  batch_slopes[at(1 * 4 + 2)] = 0.9F;
  const ReferenceOutput moved =
      reference_forward(per_batch, in.q.data(), in.k.data(), in.v.data(), {.alibi_slopes = batch_slopes.data()});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 5; ++i) {  // every row sees at least 5 keys: its slope moves its LSE
        const std::size_t e = at(reference_lse_index(per_batch, b, i, h));
        if (b == 1 && h == 2) {
          EXPECT_NE(moved.lse[e], want.lse[e]) << "b " << b << " h " << h << " row " << i;
        } else {
          EXPECT_EQ(moved.lse[e], want.lse[e]) << "b " << b << " h " << h << " row " << i;
        }
      }
}

TEST(ReferenceModifiersTest, StorageOverloadAndPagedCacheApplyModifiers) {
  // Two sequences of 9 and 6 cached keys in pages of 4, pages out of order.
  const ProblemOptions options{.mask = Mask::causal_bottom_right(),
                               .seqlens_k = {9, 6},
                               .block_table = {5, 0, 3, 2, 4, 1},
                               .page_size = 4,
                               .modifiers = {.softcap = 1.1,
                                             .sinks = true,
                                             .alibi = AlibiSlopes::kPerBatchHead,
                                             .dropout_p = 0.25,
                                             .seed = 99,
                                             .offset = 5}};
  const AttentionProblem paged = make_problem(std::vector<int64_t>{2, 5, 4, 8}, std::vector<int64_t>{6, 4, 2, 8},
                                              std::vector<int64_t>{6, 4, 2, 6}, options);
  std::mt19937 rng(9);
  const std::vector<std::uint16_t> q = testing::random_bits(q_extent(paged), paged.dtype, 0.0F, 1.5F, rng);
  const std::vector<std::uint16_t> k = testing::random_bits(k_extent(paged), paged.dtype, 0.0F, 1.0F, rng);
  const std::vector<std::uint16_t> v = testing::random_bits(v_extent(paged), paged.dtype, 0.0F, 1.0F, rng);
  const ModifierValuesHost m = random_modifiers(paged, 11);
  const ReferenceOutput got = reference_forward(paged, q.data(), k.data(), v.data(), m.tensors());
  const UnpagedKv cache = unpage_kv(paged, k.data(), v.data());
  const auto widen = [&](const std::vector<std::uint16_t>& bits) {
    std::vector<double> out;
    for (std::uint16_t x : bits) out.push_back(bits_to_float(paged.dtype, x));
    return out;
  };
  const Values in{widen(q), widen(cache.k), widen(cache.v)};
  expect_close(got, direct_modified_attention(cache.problem, in, m), 1e-12, "paged");
  AttentionProblem plain = paged;
  plain.modifiers = {};
  EXPECT_GT(max_error(got, reference_forward(plain, q.data(), k.data(), v.data())), 1e-3);
}

TEST(ReferenceModifiersTest, MissingOrNonFiniteValuesAreInvalidArguments) {
  const ShapeCase shape = modifier_shapes()[0];
  ProblemOptions options = shape.options;
  options.modifiers = {.sinks = true, .alibi = AlibiSlopes::kPerBatchHead};
  const AttentionProblem p = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, options);
  const Values in = random_values(p, 13);
  ModifierValuesHost m = random_modifiers(p, 13);
  const auto forward = [&](const ModifierTensors& t) {
    return [&p, &in, t] { reference_forward(p, in.q.data(), in.k.data(), in.v.data(), t); };
  };
  EXPECT_THROW(forward({.sinks = nullptr, .alibi_slopes = m.slopes.data()})(), InvalidArgument);
  EXPECT_THROW(forward({.sinks = m.sinks.data(), .alibi_slopes = nullptr})(), InvalidArgument);
  EXPECT_NE(testing::error_of<InvalidArgument>(forward({.alibi_slopes = m.slopes.data()})).find("sinks pointer"),
            std::string::npos);
  // The storage overload checks the same.
  const std::vector<std::uint16_t> bits(at(std::max({q_extent(p), k_extent(p), v_extent(p)})), 0);
  EXPECT_THROW(reference_forward(p, bits.data(), bits.data(), bits.data(), {.alibi_slopes = m.slopes.data()}),
               InvalidArgument);
  m.slopes[3] = std::nanf("");
  const std::string message = testing::error_of<InvalidArgument>(forward(m.tensors()));
  EXPECT_NE(message.find("alibi_slopes[3]"), std::string::npos) << message;
  m.slopes[3] = 0.5F;
  m.sinks[1] = std::numeric_limits<float>::infinity();
  const std::string sink_message = testing::error_of<InvalidArgument>(forward(m.tensors()));
  EXPECT_NE(sink_message.find("sinks[1]"), std::string::npos) << sink_message;
}

// The comparison above can fail: the direct formula with softcap after the
// ALiBi term, or without the sink, disagrees with the reference by far more
// than its tolerance.
TEST(ReferenceModifiersTest, CheckCatchesPlantedModifierBugs) {
  const ShapeCase shape = modifier_shapes()[1];
  ProblemOptions options = shape.options;
  options.modifiers = {.softcap = 0.9, .sinks = true, .alibi = AlibiSlopes::kPerHead};
  const AttentionProblem p = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, options);
  const Values in = random_values(p, 17);
  const ModifierValuesHost m = random_modifiers(p, 17);
  const ReferenceOutput got = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), m.tensors());
  EXPECT_LT(max_error(got, direct_modified_attention(p, in, m)), 1e-12);
  EXPECT_GT(max_error(got, direct_modified_attention(p, in, m, Planted::kSoftcapAfterAlibi)), 1e-3);
  EXPECT_GT(max_error(got, direct_modified_attention(p, in, m, Planted::kSinkDropped)), 1e-3);
}

// ---- Dropout ----

// A problem with `modifiers` on a packed shape with a window mask and key
// padding (sequence 1: 5 queries on 2 keys).
AttentionProblem dropout_problem(const ScoreModifiers& modifiers) {
  ShapeCase shape = modifier_shapes()[11];  // packed_window_padded
  shape.options.modifiers = modifiers;
  return make_problem(shape.q_shape, shape.k_shape, shape.v_shape, shape.options);
}

TEST(ReferenceDropoutTest, LseIsTheOneWithoutDropout) {
  for (const ShapeCase& shape : modifier_shapes()) {
    ProblemOptions options = shape.options;
    options.modifiers = {.dropout_p = 0.4, .seed = 11, .offset = 3};
    const AttentionProblem p = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, options);
    AttentionProblem plain = p;
    plain.modifiers = {};
    const Values in = random_values(p, 21);
    const ReferenceOutput dropped = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
    const ReferenceOutput full = reference_forward(plain, in.q.data(), in.k.data(), in.v.data());
    EXPECT_EQ(dropped.lse, full.lse) << shape.name;
    EXPECT_GT(max_error(dropped, full), 1e-3) << shape.name;
  }
}

TEST(ReferenceDropoutTest, ZeroProbabilityIsExactlyNoDropout) {
  for (const ShapeCase& shape : modifier_shapes()) {
    ProblemOptions options = shape.options;
    options.modifiers = {.dropout_p = 0, .seed = 0xFFFFFFFFFFFFFFFFull, .offset = 77};
    const AttentionProblem p = make_problem(shape.q_shape, shape.k_shape, shape.v_shape, options);
    AttentionProblem plain = p;
    plain.modifiers = {};
    const Values in = random_values(p, 23);
    const ReferenceOutput got = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
    const ReferenceOutput want = reference_forward(plain, in.q.data(), in.k.data(), in.v.data());
    EXPECT_EQ(got.o, want.o) << shape.name;
    EXPECT_EQ(got.lse, want.lse) << shape.name;
  }
}

TEST(ReferenceDropoutTest, WeightIsZeroOrTheKeepScaleAtTheSharedKeepDecision) {
  const AttentionProblem p = dropout_problem({.dropout_p = 0.3, .seed = 5, .offset = 6});
  const ModifierValues mods(p, {});
  ASSERT_TRUE(mods.has_dropout());
  int64_t kept = 0;
  int64_t total = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < 20; ++i)
        for (int64_t j = 0; j < 20; ++j) {
          const bool keep = kept_by_dropout(p, b, h, i, j);
          EXPECT_EQ(mods.dropout_weight(b, h, i, j), keep ? 1.0 / (1.0 - 0.3) : 0.0)
              << b << " " << h << " " << i << " " << j;
          kept += keep;
          ++total;
        }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, total);
  const ModifierValues off(dropout_problem({}), {});
  EXPECT_FALSE(off.has_dropout());
  EXPECT_EQ(off.dropout_weight(1, 2, 3, 4), 1.0);
}

TEST(ReferenceDropoutTest, AnotherOffsetOrSeedGivesAnotherOutput) {
  const ScoreModifiers base{.dropout_p = 0.5, .seed = 31, .offset = 8};
  const AttentionProblem p = dropout_problem(base);
  const Values in = random_values(p, 25);
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
  EXPECT_EQ(reference_forward(p, in.q.data(), in.k.data(), in.v.data()).o, want.o);  // the same call: the same O
  ScoreModifiers offset = base;
  offset.offset += 1;
  ScoreModifiers seed = base;
  seed.seed += 1;
  for (const ScoreModifiers& other : {offset, seed}) {
    const AttentionProblem q = dropout_problem(other);
    EXPECT_GT(max_error(reference_forward(q, in.q.data(), in.k.data(), in.v.data()), want), 1e-3);
  }
}

// The dropout comparison can fail: the direct formula without the 1 / (1 - p),
// renormalized over the kept keys, or masking by packed rows disagrees with
// the reference by far more than its tolerance.
TEST(ReferenceDropoutTest, CheckCatchesPlantedDropoutBugs) {
  const AttentionProblem p = dropout_problem({.sinks = true, .dropout_p = 0.2, .seed = 123, .offset = 456});
  const Values in = random_values(p, 27);
  const ModifierValuesHost m = random_modifiers(p, 27);
  const ReferenceOutput got = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), m.tensors());
  EXPECT_LT(max_error(got, direct_modified_attention(p, in, m)), 1e-12);
  for (const Planted planted : {Planted::kDropoutUnscaled, Planted::kDropoutRenormalized, Planted::kDropoutPackedRow}) {
    EXPECT_GT(max_error(got, direct_modified_attention(p, in, m, planted)), 1e-3) << static_cast<int>(planted);
  }
}

}  // namespace
}  // namespace attune
