#include <gtest/gtest.h>
#include <cstdio>
#include <random>
#include "reference/accuracy.h"
#include "reference/backward.h"
#include "reference/backward_accuracy.h"
#include "runtime/runtime.h"
#include "generator/variants.h"
#include "tuner/timing.h"

namespace attune::tuner {
namespace {
TEST(Exp, Errors) {
  Runtime runtime({.backend = Backend::kEmu});
  for (DType dt : {DType::kBF16, DType::kF16})
  for (int d : {32, 64})
  for (std::uint8_t bits : {0, 1, 2, 4, 7}) {
    for (int causal = 0; causal < 2; ++causal) {
    const ProblemOptions opt{.dtype = dt, .mask = causal ? Mask::causal_bottom_right() : Mask::none(), .modifiers = sweep_modifiers(bits, 30)};
    ProblemOptions opt0 = opt; opt0.modifiers = {};
    const AttentionProblem p = make_problem(std::vector<std::int64_t>{1, 77, 2, d}, std::vector<std::int64_t>{1, 90, 2, d}, std::vector<std::int64_t>{1, 90, 2, d}, opt);
    const AttentionProblem p0 = make_problem(std::vector<std::int64_t>{1, 77, 2, d}, std::vector<std::int64_t>{1, 90, 2, d}, std::vector<std::int64_t>{1, 90, 2, d}, opt0);
    std::mt19937 rng(7);
    auto q = random_bits(q_extent(p), dt, rng), k = random_bits(k_extent(p), dt, rng), v = random_bits(v_extent(p), dt, rng);
    ModifierInputs mi = modifier_inputs(p, rng);
    auto mods = mi.host();
    const ReferenceOutput want = reference_forward(p, q.data(), k.data(), v.data(), mods);
    const ReferenceOutput want0 = reference_forward(p0, q.data(), k.data(), v.data());
    const ReferenceOutput naive0 = naive_storage_attention(p0, q.data(), k.data(), v.data());
    const AccuracyErrors n0 = accuracy_errors(naive0, want0);
    auto vs = enumerate_variants("fwd", dt, d, d, runtime.arch(), bits);
    double worst = 0, worstl = 0;
    for (size_t i = 0; i < vs.size(); i += std::max<size_t>(1, vs.size() / 4)) {
      std::vector<std::uint16_t> o(o_extent(p)); std::vector<float> lse(lse_extent(p));
      runtime.forward_variant(vs[i], p, {q.data(), k.data(), v.data(), o.data(), lse.data(), mods.sinks, mods.alibi_slopes});
      ReferenceOutput got; for (auto b : o) got.o.push_back(bits_to_float(dt, b)); got.lse.assign(lse.begin(), lse.end());
      AccuracyErrors g = accuracy_errors(got, want);
      worst = std::max(worst, g.o); worstl = std::max(worstl, g.lse);
    }
    std::printf("fwd %s d%d mods %-20s causal %d: kernel o %.2e lse %.2e | naive0 o %.2e lse %.2e | ratio o %.2f lse %.2f\n",
                std::string(to_string(dt)).c_str(), d, modifier_names(bits).c_str(), causal, worst, worstl, n0.o, n0.lse, worst / n0.o, worstl / n0.lse);
    }
  }
}
TEST(Exp, Backward) {
  Runtime runtime({.backend = Backend::kEmu});
  for (DType dt : {DType::kBF16, DType::kF16})
  for (int d : {32, 64})
  for (std::uint8_t bits : {0, 1, 2, 4, 7}) {
    const ProblemOptions opt{.dtype = dt, .mask = Mask::causal_bottom_right(), .modifiers = sweep_modifiers(bits, 30)};
    ProblemOptions opt0 = opt; opt0.modifiers = {};
    const AttentionProblem p = make_problem(std::vector<std::int64_t>{1, 48, 2, d}, std::vector<std::int64_t>{1, 61, 2, d}, std::vector<std::int64_t>{1, 61, 2, d}, opt);
    const AttentionProblem p0 = make_problem(std::vector<std::int64_t>{1, 48, 2, d}, std::vector<std::int64_t>{1, 61, 2, d}, std::vector<std::int64_t>{1, 61, 2, d}, opt0);
    std::mt19937 rng(7);
    auto q = random_bits(q_extent(p), dt, rng), k = random_bits(k_extent(p), dt, rng), v = random_bits(v_extent(p), dt, rng), dout = random_bits(o_extent(p), dt, rng);
    ModifierInputs mi = modifier_inputs(p, rng);
    auto mods = mi.host();
    const ReferenceOutput fwd = reference_forward(p, q.data(), k.data(), v.data(), mods);
    std::vector<std::uint16_t> o; for (double x : fwd.o) o.push_back(float_to_bits(dt, (float)x));
    std::vector<float> lse(fwd.lse.begin(), fwd.lse.end());
    const ReferenceGradients want = reference_backward(p, q.data(), k.data(), v.data(), dout.data(), mods);
    const ReferenceGradients want0 = reference_backward(p0, q.data(), k.data(), v.data(), dout.data());
    const ReferenceGradients naive0 = naive_storage_backward(p0, q.data(), k.data(), v.data(), dout.data());
    GradientErrors n0 = gradient_errors(naive0, want0);
    auto vs = enumerate_variants("bwd", dt, d, d, runtime.arch(), bits);
    double w[4] = {0,0,0,0};
    for (size_t i = 0; i < vs.size(); i += std::max<size_t>(1, vs.size() / 3)) {
      std::vector<std::uint16_t> dq(q.size()), dk(k.size()), dv(v.size()); std::vector<float> ds(p.modifiers.sinks ? 2 : 0);
      runtime.backward_variant(vs[i], p, {q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), dq.data(), dk.data(), dv.data(), mods.sinks, mods.alibi_slopes, ds.empty() ? nullptr : ds.data()});
      ReferenceGradients g; for (auto b : dq) g.dq.push_back(bits_to_float(dt, b)); for (auto b : dk) g.dk.push_back(bits_to_float(dt, b)); for (auto b : dv) g.dv.push_back(bits_to_float(dt, b));
      GradientErrors e = gradient_errors(g, want);
      w[0] = std::max(w[0], e.dq); w[1] = std::max(w[1], e.dk); w[2] = std::max(w[2], e.dv);
      for (size_t h = 0; h < ds.size(); ++h) w[3] = std::max(w[3], std::abs(ds[h] - want.dsink[h]));
    }
    double dsmax = 0; for (double x : want.dsink) dsmax = std::max(dsmax, std::abs(x));
    std::printf("bwd %s d%d mods %-20s: kernel dq %.2e dk %.2e dv %.2e dsink %.2e (|dsink| %.2e) | naive0 dq %.2e dk %.2e dv %.2e | ratio %.2f %.2f %.2f\n",
                std::string(to_string(dt)).c_str(), d, modifier_names(bits).c_str(), w[0], w[1], w[2], w[3], dsmax, n0.dq, n0.dk, n0.dv, w[0]/n0.dq, w[1]/n0.dk, w[2]/n0.dv);
  }
}
}
}
