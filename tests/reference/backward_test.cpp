// The fp64 reference backward against central finite differences of the fp64
// forward, on every mask kind, padding, packed variable length, GQA and
// Dk != Dv, with and without score modifiers (dsink included) and dropout;
// plus the exact zeros of empty rows and unseen keys.
#include "reference/backward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "reference/backward_accuracy.h"
#include "reference/reference.h"

namespace attune {
namespace {

std::size_t at(int64_t index) { return static_cast<std::size_t>(index); }

int64_t o_size(const AttentionProblem& p) {
  return (p.is_packed() ? 1 : p.batch) * p.seqlen_q * p.heads_q * p.head_dim_v;
}

// Q, K, V in the problem's layout, dO laid out like ReferenceOutput::o, and
// the modifiers' values the problem uses (empty otherwise).
struct Tensors {
  std::vector<double> q, k, v, d_o;
  std::vector<float> sinks, slopes;
  ModifierTensors modifiers() const {
    return {.sinks = sinks.empty() ? nullptr : sinks.data(), .alibi_slopes = slopes.empty() ? nullptr : slopes.data()};
  }
};

Tensors random_tensors(const AttentionProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Tensors t{.q = std::vector<double>(at(q_extent(p))),
            .k = std::vector<double>(at(k_extent(p))),
            .v = std::vector<double>(at(v_extent(p))),
            .d_o = std::vector<double>(at(o_size(p)))};
  for (auto* x : {&t.q, &t.k, &t.v, &t.d_o}) {
    for (double& e : *x) e = normal(rng);
  }
  // Sinks on a grid of 1/64 in [-1, 2.5]: x +- kSinkStep is exact in float32.
  std::uniform_int_distribution<int> sink_steps(-64, 160);
  std::uniform_real_distribution<float> slope(0.05F, 0.7F);
  if (p.modifiers.sinks) {
    for (int64_t h = 0; h < p.heads_q; ++h) t.sinks.push_back(static_cast<float>(sink_steps(rng)) / 64.0F);
  }
  for (int64_t e = 0; e < alibi_extent(p); ++e) t.slopes.push_back(slope(rng));
  return t;
}

ReferenceGradients backward(const AttentionProblem& p, const Tensors& t) {
  return reference_backward(p, t.q.data(), t.k.data(), t.v.data(), t.d_o.data(), t.modifiers());
}

// The loss whose gradient reference_backward returns.
double loss(const AttentionProblem& p, const Tensors& t) {
  const ReferenceOutput out = reference_forward(p, t.q.data(), t.k.data(), t.v.data(), t.modifiers());
  double sum = 0.0;
  for (std::size_t i = 0; i < out.o.size(); ++i) sum += t.d_o[i] * out.o[i];
  return sum;
}

constexpr double kStep = 1e-6;
const double kSinkStep = std::ldexp(1.0, -20);  // about 1e-6, exact on float32 sinks below 16
constexpr double kTolerance = 1e-6;             // absolute and relative

bool disagree(double numeric, double analytic) {
  return !(std::abs(numeric - analytic) <= kTolerance * (1 + std::abs(numeric)));
}

// Elements of Q, K and V (contiguous problems only: element e of a tensor is
// element e of its gradient) and sinks where the central difference of the
// loss and the analytic gradient disagree; dsink must be empty without sinks.
std::vector<std::string> finite_difference_mismatches(const AttentionProblem& p, Tensors t,
                                                      const ReferenceGradients& g) {
  std::vector<std::string> bad;
  const std::pair<std::vector<double>*, const std::vector<double>*> pairs[] = {
      {&t.q, &g.dq}, {&t.k, &g.dk}, {&t.v, &g.dv}};
  const char* names[] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which) {
    auto [x, grad] = pairs[which];
    if (x->size() != grad->size()) {
      bad.push_back(std::string(names[which]) + " has " + std::to_string(grad->size()) + " elements, expected " +
                    std::to_string(x->size()));
      continue;
    }
    for (std::size_t e = 0; e < x->size(); ++e) {
      const double saved = (*x)[e];
      (*x)[e] = saved + kStep;
      const double up = loss(p, t);
      (*x)[e] = saved - kStep;
      const double down = loss(p, t);
      (*x)[e] = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double analytic = (*grad)[e];
      if (disagree(numeric, analytic)) {
        bad.push_back(std::string(names[which]) + "[" + std::to_string(e) + "]: analytic " + std::to_string(analytic) +
                      ", finite difference " + std::to_string(numeric));
      }
    }
  }
  if (g.dsink.size() != t.sinks.size()) {
    bad.push_back("dsink has " + std::to_string(g.dsink.size()) + " elements, expected " +
                  std::to_string(t.sinks.size()));
    return bad;
  }
  for (std::size_t h = 0; h < t.sinks.size(); ++h) {
    const float saved = t.sinks[h];
    t.sinks[h] = static_cast<float>(saved + kSinkStep);
    const double up = loss(p, t);
    t.sinks[h] = static_cast<float>(saved - kSinkStep);
    const double down = loss(p, t);
    t.sinks[h] = saved;
    const double numeric = (up - down) / (2 * kSinkStep);
    if (disagree(numeric, g.dsink[h])) {
      bad.push_back("dsink[" + std::to_string(h) + "]: analytic " + std::to_string(g.dsink[h]) +
                    ", finite difference " + std::to_string(numeric));
    }
  }
  return bad;
}

struct Case {
  std::string name;
  std::vector<int64_t> q_shape, k_shape, v_shape;
  ProblemOptions options;
};

AttentionProblem problem_of(const Case& c) { return make_problem(c.q_shape, c.k_shape, c.v_shape, c.options); }

// Three packed sequences (3, 5 and 1 queries over 5, 2 and 6 keys, keeping
// 4, 2 and 5 of them), bottom-right causal: sequence 1 has 5 queries on 2 keys.
Case packed_varlen_causal_padding(std::string name, const ScoreModifiers& modifiers = {}) {
  return {std::move(name),
          {9, 2, 4},
          {13, 1, 4},
          {13, 1, 3},
          {.mask = Mask::causal_bottom_right(),
           .seqlens_k = {4, 2, 5},
           .cu_seqlens_q = {0, 3, 8, 9},
           .cu_seqlens_k = {0, 5, 7, 13},
           .modifiers = modifiers}};
}

std::vector<Case> finite_difference_cases() {
  std::vector<Case> c;
  c.push_back({"no_mask", {2, 4, 2, 5}, {2, 6, 2, 5}, {2, 6, 2, 5}, {}});
  c.push_back({"causal_bottom_right_wide",
               {1, 4, 2, 4},
               {1, 7, 2, 4},
               {1, 7, 2, 4},
               {.mask = Mask::causal_bottom_right(), .scale = 1.7}});
  c.push_back({"causal_bottom_right_tall",  // rows 0..2 see no key
               {1, 7, 1, 4},
               {1, 4, 1, 4},
               {1, 4, 1, 3},
               {.mask = Mask::causal_bottom_right()}});
  c.push_back({"causal_top_left_tall", {1, 6, 2, 4}, {1, 5, 2, 4}, {1, 5, 2, 4}, {.mask = Mask::causal_top_left()}});
  c.push_back({"causal_top_left_wide", {1, 4, 1, 3}, {1, 7, 1, 3}, {1, 7, 1, 3}, {.mask = Mask::causal_top_left()}});
  c.push_back({"window_2_1", {1, 6, 1, 4}, {1, 8, 1, 4}, {1, 8, 1, 3}, {.mask = Mask::window(2, 1)}});
  c.push_back({"window_0_2_tall", {1, 7, 1, 3}, {1, 5, 1, 3}, {1, 5, 1, 4}, {.mask = Mask::window(0, 2)}});
  c.push_back({"window_left_only", {1, 5, 1, 4}, {1, 7, 1, 4}, {1, 7, 1, 4}, {.mask = Mask::window(1, -1)}});
  c.push_back({"window_right_only", {1, 7, 1, 4}, {1, 5, 1, 4}, {1, 5, 1, 4}, {.mask = Mask::window(-1, 1)}});
  c.push_back({"padding", {2, 5, 2, 4}, {2, 6, 2, 4}, {2, 6, 2, 3}, {.seqlens_k = {3, 6}}});
  c.push_back({"padding_causal",
               {2, 4, 1, 4},
               {2, 6, 1, 4},
               {2, 6, 1, 4},
               {.mask = Mask::causal_bottom_right(), .seqlens_k = {2, 5}}});
  c.push_back({"packed_varlen",
               {9, 2, 4},
               {13, 2, 4},
               {13, 2, 3},
               {.scale = 0.35, .cu_seqlens_q = {0, 3, 8, 9}, .cu_seqlens_k = {0, 5, 7, 13}}});
  c.push_back(packed_varlen_causal_padding("packed_varlen_causal_padding"));
  c.push_back({"gqa_4_to_2", {2, 5, 4, 4}, {2, 6, 2, 4}, {2, 6, 2, 4}, {.mask = Mask::causal_bottom_right()}});
  c.push_back({"mqa_4_to_1", {1, 5, 4, 3}, {1, 7, 1, 3}, {1, 7, 1, 5}, {.scale = 0.8}});
  c.push_back({"dk_above_dv", {1, 5, 2, 8}, {1, 6, 2, 8}, {1, 6, 2, 2}, {.mask = Mask::window(1, 1)}});
  c.push_back({"dv_above_dk", {1, 4, 1, 2}, {1, 6, 1, 2}, {1, 6, 1, 8}, {.scale = 2.5}});
  return c;
}

// Each case's gradients, on random tensors seeded from `first_seed` up,
// against finite differences of the forward; dsink holds one value per query
// head where the case has sinks and none otherwise.
void expect_finite_differences_match(const std::vector<Case>& cases, unsigned first_seed) {
  unsigned seed = first_seed;
  for (const Case& c : cases) {
    const AttentionProblem p = problem_of(c);
    const Tensors t = random_tensors(p, seed++);
    const ReferenceGradients g = backward(p, t);
    EXPECT_EQ(g.dsink.size(), p.modifiers.sinks ? at(p.heads_q) : 0U) << c.name;
    const std::vector<std::string> bad = finite_difference_mismatches(p, t, g);
    EXPECT_TRUE(bad.empty()) << c.name << ": " << bad.size() << " mismatches, first " << bad.front();
  }
}

TEST(BackwardTest, MatchesFiniteDifferencesOfTheForward) {
  expect_finite_differences_match(finite_difference_cases(), 1);
}

// The finite-difference check of one case: its problem, random tensors and
// their right gradients (which tests break to see the check fail).
struct GradientCheck {
  GradientCheck(const Case& c, unsigned seed) : p(problem_of(c)), t(random_tensors(p, seed)), right(backward(p, t)) {}
  std::vector<std::string> mismatches(const ReferenceGradients& g) const {
    return finite_difference_mismatches(p, t, g);
  }
  AttentionProblem p;
  Tensors t;
  ReferenceGradients right;
};

TEST(BackwardTest, FiniteDifferenceCheckCatchesWrongGradients) {
  const GradientCheck check(finite_difference_cases()[1], 99);  // causal, scale 1.7
  ASSERT_TRUE(check.mismatches(check.right).empty());

  ReferenceGradients unscaled = check.right;  // dq without its factor scale
  for (double& x : unscaled.dq) x /= check.p.softmax_scale();
  EXPECT_FALSE(check.mismatches(unscaled).empty());

  ReferenceGradients nudged = check.right;  // one element off by 1e-4
  nudged.dv[5] += 1e-4;
  const std::vector<std::string> bad = check.mismatches(nudged);
  ASSERT_EQ(bad.size(), 1U);
  EXPECT_EQ(bad[0].rfind("dv[5]", 0), 0U) << bad[0];
}

// Every gradient finite; dq of the listed (b, row) pairs and dk, dv of the
// listed (b, key) pairs exactly 0 in every head. Also checks the rest against
// finite differences.
void expect_empty_rows_and_unseen_keys(const AttentionProblem& p, const std::vector<std::pair<int64_t, int64_t>>& rows,
                                       const std::vector<std::pair<int64_t, int64_t>>& keys) {
  const Tensors t = random_tensors(p, 5);
  const ReferenceGradients g = backward(p, t);
  for (const auto* grad : {&g.dq, &g.dk, &g.dv}) {
    for (double x : *grad) ASSERT_TRUE(std::isfinite(x));
  }
  for (const auto& [b, row] : rows) {
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t d = 0; d < p.head_dim_k; ++d)
        EXPECT_EQ(g.dq[at(reference_dq_index(p, b, row, h) + d)], 0.0) << "dq b " << b << " row " << row;
  }
  for (const auto& [b, key] : keys) {
    for (int64_t h = 0; h < p.heads_kv; ++h) {
      for (int64_t d = 0; d < p.head_dim_k; ++d)
        EXPECT_EQ(g.dk[at(reference_dk_index(p, b, key, h) + d)], 0.0) << "dk b " << b << " key " << key;
      for (int64_t d = 0; d < p.head_dim_v; ++d)
        EXPECT_EQ(g.dv[at(reference_dv_index(p, b, key, h) + d)], 0.0) << "dv b " << b << " key " << key;
    }
  }
  const std::vector<std::string> bad = finite_difference_mismatches(p, t, g);
  EXPECT_TRUE(bad.empty()) << bad.size() << " mismatches, first " << bad.front();
}

TEST(BackwardTest, EmptyRowsAndUnseenKeysHaveZeroGradients) {
  // Packed, window (1, 0): sequence 0 (7 queries, 5 keys) has rows 0 and 1
  // before the first key; sequence 1 (3 queries, 6 keys) never reaches keys
  // 0 and 1 (global 5, 6); sequence 2 has no key at all (rows 10, 11).
  const AttentionProblem packed =
      make_problem(std::vector<int64_t>{12, 2, 4}, std::vector<int64_t>{11, 2, 4}, std::vector<int64_t>{11, 2, 3},
                   {.mask = Mask::window(1, 0), .cu_seqlens_q = {0, 7, 10, 12}, .cu_seqlens_k = {0, 5, 11, 11}});
  expect_empty_rows_and_unseen_keys(packed, {{0, 0}, {0, 1}, {2, 10}, {2, 11}}, {{1, 5}, {1, 6}});

  // Padding: batch 0 has no key, batch 1 keeps 4 of 5.
  const AttentionProblem padded = make_problem(std::vector<int64_t>{2, 3, 2, 4}, std::vector<int64_t>{2, 5, 1, 4},
                                               std::vector<int64_t>{2, 5, 1, 3}, {.seqlens_k = {0, 4}});
  expect_empty_rows_and_unseen_keys(padded, {{0, 0}, {0, 1}, {0, 2}}, {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 4}});

  // No key at all.
  const AttentionProblem keyless = make_problem(std::vector<int64_t>{1, 3, 1, 4}, std::vector<int64_t>{1, 0, 1, 4},
                                                std::vector<int64_t>{1, 0, 1, 2}, {});
  expect_empty_rows_and_unseen_keys(keyless, {{0, 0}, {0, 1}, {0, 2}}, {});
}

TEST(BackwardTest, GqaEqualsSumOverRepeatedKvHeads) {
  for (const int64_t heads_kv : {2, 1}) {
    const AttentionProblem p =
        make_problem(std::vector<int64_t>{2, 5, 4, 4}, std::vector<int64_t>{2, 6, heads_kv, 4},
                     std::vector<int64_t>{2, 6, heads_kv, 3}, {.mask = Mask::causal_bottom_right(), .scale = 0.6});
    const int64_t group = p.group_size();
    AttentionProblem mha = p;
    mha.heads_kv = p.heads_q;
    set_contiguous_strides(mha);
    const Tensors t = random_tensors(p, 17);
    Tensors repeated{.q = t.q,
                     .k = std::vector<double>(at(k_extent(mha))),
                     .v = std::vector<double>(at(v_extent(mha))),
                     .d_o = t.d_o};
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < p.seqlen_k; ++j)
        for (int64_t h = 0; h < p.heads_q; ++h) {
          for (int64_t d = 0; d < p.head_dim_k; ++d)
            repeated.k[at(element_offset(mha.k_strides, b, j, h) + d)] =
                t.k[at(element_offset(p.k_strides, b, j, h / group) + d)];
          for (int64_t d = 0; d < p.head_dim_v; ++d)
            repeated.v[at(element_offset(mha.v_strides, b, j, h) + d)] =
                t.v[at(element_offset(p.v_strides, b, j, h / group) + d)];
        }
    const ReferenceGradients gqa = backward(p, t);
    const ReferenceGradients full = backward(mha, repeated);
    ASSERT_EQ(gqa.dq.size(), full.dq.size());
    for (std::size_t i = 0; i < gqa.dq.size(); ++i) EXPECT_EQ(gqa.dq[i], full.dq[i]) << "dq " << i;
    std::vector<double> dk_sum(gqa.dk.size(), 0.0), dv_sum(gqa.dv.size(), 0.0);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < p.seqlen_k; ++j)
        for (int64_t h = 0; h < p.heads_q; ++h) {
          for (int64_t d = 0; d < p.head_dim_k; ++d)
            dk_sum[at(reference_dk_index(p, b, j, h / group) + d)] += full.dk[at(reference_dk_index(mha, b, j, h) + d)];
          for (int64_t d = 0; d < p.head_dim_v; ++d)
            dv_sum[at(reference_dv_index(p, b, j, h / group) + d)] += full.dv[at(reference_dv_index(mha, b, j, h) + d)];
        }
    // The sums run in another order than the reference's: equal up to rounding.
    for (std::size_t i = 0; i < dk_sum.size(); ++i) EXPECT_NEAR(gqa.dk[i], dk_sum[i], 1e-13) << "dk " << i;
    for (std::size_t i = 0; i < dv_sum.size(); ++i) EXPECT_NEAR(gqa.dv[i], dv_sum[i], 1e-13) << "dv " << i;
  }
}

TEST(BackwardTest, StorageOverloadMatchesFp64OnRepresentableValues) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    const AttentionProblem p = make_problem(
        std::vector<int64_t>{2, 5, 4, 6}, std::vector<int64_t>{2, 7, 2, 6}, std::vector<int64_t>{2, 7, 2, 3},
        {.dtype = dtype, .mask = Mask::causal_bottom_right(), .scale = 0.45, .seqlens_k = {7, 4}});
    Tensors t = random_tensors(p, 23);
    for (auto* x : {&t.q, &t.k, &t.v, &t.d_o}) {
      for (double& e : *x) e = round_to(dtype, static_cast<float>(e));
    }
    // Q and K stored with padded rows and heads (NaN padding), V and dO contiguous.
    AttentionProblem strided = p;
    strided.q_strides = {.batch = p.seqlen_q * 64, .seq = 64, .head = 9};
    strided.k_strides = {.batch = p.seqlen_k * 32, .seq = 32, .head = 11};
    const std::uint16_t nan_bits = float_to_bits(dtype, std::nanf(""));
    std::vector<std::uint16_t> q(at(q_extent(strided)), nan_bits), k(at(k_extent(strided)), nan_bits);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < p.seqlen_q; ++i)
        for (int64_t h = 0; h < p.heads_q; ++h)
          for (int64_t d = 0; d < p.head_dim_k; ++d)
            q[at(element_offset(strided.q_strides, b, i, h) + d)] =
                float_to_bits(dtype, static_cast<float>(t.q[at(element_offset(p.q_strides, b, i, h) + d)]));
      for (int64_t j = 0; j < p.seqlen_k; ++j)
        for (int64_t h = 0; h < p.heads_kv; ++h)
          for (int64_t d = 0; d < p.head_dim_k; ++d)
            k[at(element_offset(strided.k_strides, b, j, h) + d)] =
                float_to_bits(dtype, static_cast<float>(t.k[at(element_offset(p.k_strides, b, j, h) + d)]));
    }
    const auto bits = [&](const std::vector<double>& x) {
      std::vector<std::uint16_t> out(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bits(dtype, static_cast<float>(x[i]));
      return out;
    };
    const std::vector<std::uint16_t> v = bits(t.v), d_o = bits(t.d_o);
    const ReferenceGradients got = reference_backward(strided, q.data(), k.data(), v.data(), d_o.data());
    const ReferenceGradients want = backward(p, t);
    const std::string name(to_string(dtype));
    ASSERT_EQ(got.dq.size(), want.dq.size()) << name;
    ASSERT_EQ(got.dk.size(), want.dk.size()) << name;
    ASSERT_EQ(got.dv.size(), want.dv.size()) << name;
    for (std::size_t i = 0; i < got.dq.size(); ++i) EXPECT_EQ(got.dq[i], want.dq[i]) << name << " dq " << i;
    for (std::size_t i = 0; i < got.dk.size(); ++i) EXPECT_EQ(got.dk[i], want.dk[i]) << name << " dk " << i;
    for (std::size_t i = 0; i < got.dv.size(); ++i) EXPECT_EQ(got.dv[i], want.dv[i]) << name << " dv " << i;
  }
}

// Softcap, sinks and ALiBi alone and together, under masks, GQA, padding and
// packed variable length (with rows that see no key but still meet the sink).
std::vector<Case> modifier_cases() {
  std::vector<Case> c;
  const ScoreModifiers all{.softcap = 1.1, .sinks = true, .alibi = AlibiSlopes::kPerHead};
  c.push_back({"all_causal_gqa",
               {2, 5, 4, 4},
               {2, 7, 2, 4},
               {2, 7, 2, 3},
               {.mask = Mask::causal_bottom_right(), .scale = 0.8, .modifiers = all}});
  c.push_back(packed_varlen_causal_padding("all_packed_varlen_causal_padding",
                                           {.softcap = 0.8, .sinks = true, .alibi = AlibiSlopes::kPerBatchHead}));
  c.push_back({"all_packed_varlen",
               {9, 4, 4},
               {13, 2, 4},
               {13, 2, 3},
               {.scale = 0.9, .cu_seqlens_q = {0, 3, 8, 9}, .cu_seqlens_k = {0, 5, 7, 13}, .modifiers = all}});
  c.push_back({"softcap_window",
               {1, 6, 2, 4},
               {1, 8, 2, 4},
               {1, 8, 2, 3},
               {.mask = Mask::window(2, 1), .scale = 1.2, .modifiers = {.softcap = 0.7}}});
  c.push_back({"sinks_top_left_tall",
               {1, 7, 2, 4},
               {1, 5, 2, 4},
               {1, 5, 2, 3},
               {.mask = Mask::causal_top_left(), .modifiers = {.sinks = true}}});
  c.push_back({"alibi_per_batch_padding",
               {2, 5, 2, 4},
               {2, 6, 1, 4},
               {2, 6, 1, 3},
               {.seqlens_k = {3, 6}, .modifiers = {.alibi = AlibiSlopes::kPerBatchHead}}});
  return c;
}

TEST(BackwardModifiersTest, MatchesFiniteDifferencesOfTheForward) {
  expect_finite_differences_match(modifier_cases(), 31);
}

TEST(BackwardModifiersTest, DsinkIsEmptyWithoutSinks) {
  for (const Case& c : finite_difference_cases()) {
    const AttentionProblem p = problem_of(c);
    EXPECT_TRUE(backward(p, random_tensors(p, 3)).dsink.empty()) << c.name;
  }
  Case softcap_alibi = modifier_cases()[0];
  softcap_alibi.options.modifiers.sinks = false;
  const AttentionProblem p = problem_of(softcap_alibi);
  EXPECT_TRUE(backward(p, random_tensors(p, 3)).dsink.empty());
}

// The finite-difference check above can fail on the modifiers: a dsink of
// the wrong sign, and gradients that ignore the chain rule through tanh (those
// of the same problem without softcap), are both reported.
TEST(BackwardModifiersTest, FiniteDifferenceCheckCatchesWrongModifierGradients) {
  const GradientCheck check(modifier_cases()[0], 77);
  ASSERT_TRUE(check.mismatches(check.right).empty());

  ReferenceGradients flipped = check.right;
  for (double& x : flipped.dsink) x = -x;
  const std::vector<std::string> bad = check.mismatches(flipped);
  ASSERT_EQ(bad.size(), flipped.dsink.size());
  EXPECT_EQ(bad[0].rfind("dsink[0]", 0), 0U) << bad[0];

  AttentionProblem uncapped = check.p;
  uncapped.modifiers.softcap = 0;
  EXPECT_FALSE(check.mismatches(backward(uncapped, check.t)).empty());

  ReferenceGradients no_dsink = check.right;
  no_dsink.dsink.clear();
  EXPECT_FALSE(check.mismatches(no_dsink).empty());
}

// Random tensors the problem's 16-bit dtype holds exactly: as fp64 values
// and as the dtype's bit patterns.
struct StoredTensors {
  Tensors values;
  std::vector<std::uint16_t> q, k, v, d_o;
};

StoredTensors stored_tensors(const AttentionProblem& p, unsigned seed) {
  StoredTensors t{random_tensors(p, seed), {}, {}, {}, {}};
  for (auto* x : {&t.values.q, &t.values.k, &t.values.v, &t.values.d_o}) {
    for (double& e : *x) e = round_to(p.dtype, static_cast<float>(e));
  }
  const auto bits = [&](const std::vector<double>& x) {
    std::vector<std::uint16_t> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bits(p.dtype, static_cast<float>(x[i]));
    return out;
  };
  t.q = bits(t.values.q);
  t.k = bits(t.values.k);
  t.v = bits(t.values.v);
  t.d_o = bits(t.values.d_o);
  return t;
}

// The 16-bit overload on values the dtype holds exactly gives the fp64
// overload's gradients, bit for bit (modifiers, dropout and dsink included).
void expect_storage_overload_matches(const Case& c, unsigned seed) {
  AttentionProblem p = problem_of(c);
  p.dtype = DType::kBF16;
  const StoredTensors t = stored_tensors(p, seed);
  const ReferenceGradients got =
      reference_backward(p, t.q.data(), t.k.data(), t.v.data(), t.d_o.data(), t.values.modifiers());
  const ReferenceGradients want = backward(p, t.values);
  EXPECT_EQ(got.dq, want.dq);
  EXPECT_EQ(got.dk, want.dk);
  EXPECT_EQ(got.dv, want.dv);
  ASSERT_EQ(got.dsink.size(), p.modifiers.sinks ? at(p.heads_q) : 0U);
  EXPECT_EQ(got.dsink, want.dsink);
}

TEST(BackwardModifiersTest, StorageOverloadPassesModifiers) {
  expect_storage_overload_matches(modifier_cases()[1], 41);  // packed, every modifier
}

TEST(BackwardModifiersTest, MissingOrNonFiniteValuesAreInvalidArguments) {
  const AttentionProblem p = problem_of(modifier_cases()[0]);
  Tensors t = random_tensors(p, 43);
  EXPECT_THROW(
      reference_backward(p, t.q.data(), t.k.data(), t.v.data(), t.d_o.data(), {.alibi_slopes = t.slopes.data()}),
      InvalidArgument);
  t.slopes[2] = std::nanf("");
  EXPECT_THROW(backward(p, t), InvalidArgument);
}

// ---- Dropout ----

// The mask is a fixed function of (seed, offset) and position, so the forward
// is smooth in Q, K, V and the sinks and finite differences apply: a causal
// GQA problem, packed variable length with padding and an empty row, and
// dropout beside every score modifier.
std::vector<Case> dropout_cases() {
  std::vector<Case> c;
  c.push_back({"dropout_causal_gqa",
               {2, 5, 4, 4},
               {2, 7, 2, 4},
               {2, 7, 2, 3},
               {.mask = Mask::causal_bottom_right(),
                .scale = 0.8,
                .modifiers = {.dropout_p = 0.3, .seed = 0x1234567890ABCDEFull, .offset = 17}}});
  c.push_back(packed_varlen_causal_padding("dropout_packed_varlen_causal_padding",
                                           {.dropout_p = 0.5, .seed = 3, .offset = (5ull << 32) + 9}));
  c.push_back({"dropout_all_packed_varlen",
               {9, 4, 4},
               {13, 2, 4},
               {13, 2, 3},
               {.scale = 0.9,
                .cu_seqlens_q = {0, 3, 8, 9},
                .cu_seqlens_k = {0, 5, 7, 13},
                .modifiers = {.softcap = 1.1,
                              .sinks = true,
                              .alibi = AlibiSlopes::kPerHead,
                              .dropout_p = 0.17,
                              .seed = 77,
                              .offset = 1}}});
  return c;
}

TEST(BackwardDropoutTest, MatchesFiniteDifferencesOfTheForward) {
  expect_finite_differences_match(dropout_cases(), 61);
}

TEST(BackwardDropoutTest, ZeroProbabilityIsExactlyNoDropout) {
  for (Case c : dropout_cases()) {
    c.options.modifiers.dropout_p = 0;
    const AttentionProblem p = problem_of(c);
    AttentionProblem plain = p;
    plain.modifiers.seed = 0;
    plain.modifiers.offset = 0;
    const Tensors t = random_tensors(p, 63);
    const ReferenceGradients got = backward(p, t);
    const ReferenceGradients want = backward(plain, t);
    EXPECT_EQ(got.dq, want.dq) << c.name;
    EXPECT_EQ(got.dk, want.dk) << c.name;
    EXPECT_EQ(got.dv, want.dv) << c.name;
    EXPECT_EQ(got.dsink, want.dsink) << c.name;
  }
}

// The finite-difference check catches the backward's dropout mistakes: the
// gradients of another offset's mask, of no dropout, and a dV without the
// 1 / (1 - p) all fail it.
TEST(BackwardDropoutTest, FiniteDifferenceCheckCatchesWrongDropoutGradients) {
  const GradientCheck check(dropout_cases()[0], 65);
  ASSERT_TRUE(check.mismatches(check.right).empty());

  AttentionProblem other_offset = check.p;
  other_offset.modifiers.offset += 1;
  EXPECT_FALSE(check.mismatches(backward(other_offset, check.t)).empty());

  AttentionProblem undropped = check.p;
  undropped.modifiers.dropout_p = 0;
  EXPECT_FALSE(check.mismatches(backward(undropped, check.t)).empty());

  ReferenceGradients unscaled = check.right;
  for (double& x : unscaled.dv) x *= 1 - check.p.modifiers.dropout_p;
  EXPECT_FALSE(check.mismatches(unscaled).empty());
}

TEST(BackwardDropoutTest, StorageOverloadPassesDropout) {
  expect_storage_overload_matches(dropout_cases()[2], 67);  // packed, every modifier and dropout
}

// The accuracy rule's naive storage-dtype backward drops the same elements:
// it is off the fp64 reference by rounding only, and far off the gradients
// without dropout.
TEST(BackwardDropoutTest, NaiveStorageBackwardAppliesTheSameMask) {
  for (const Case& c : dropout_cases()) {
    AttentionProblem p = problem_of(c);
    p.dtype = DType::kBF16;
    const StoredTensors t = stored_tensors(p, 69);
    const ReferenceGradients naive =
        naive_storage_backward(p, t.q.data(), t.k.data(), t.v.data(), t.d_o.data(), t.values.modifiers());
    const ReferenceGradients want = backward(p, t.values);
    AttentionProblem undropped = p;
    undropped.modifiers.dropout_p = 0;
    const ReferenceGradients plain = backward(undropped, t.values);
    const GradientErrors near = gradient_errors(naive, want);
    const GradientErrors far = gradient_errors(naive, plain);
    EXPECT_TRUE(near.mismatch.empty()) << c.name << ": " << near.mismatch;
    // bf16 keeps 8 bits: errors of a few percent of values of order 1.
    EXPECT_LT(std::max({near.dq, near.dk, near.dv}), 0.1) << c.name;
    EXPECT_GT(std::max({far.dq, far.dk, far.dv}), 5 * std::max({near.dq, near.dk, near.dv})) << c.name;
  }
}

}  // namespace
}  // namespace attune
