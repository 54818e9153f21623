// The naive storage-dtype backward with score modifiers (the gradient
// rule's yardstick in the tuner's gate): as far from the fp64 reference as
// the naive backward without them is from its own (an error of the storage
// dtype's size), and much nearer than a computation that ignores them.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "reference/backward_accuracy.h"
#include "tuner/sweep.h"
#include "tuner/timing.h"

namespace attune::tuner {
namespace {

struct Case {
  AttentionProblem problem;
  std::vector<std::uint16_t> q, k, v, d_o;
  ModifierInputs modifiers;
};

// GQA (4 query heads on 2 kv heads), Dk != Dv, two sequences.
Case make_case(DType dtype, Mask mask, std::uint8_t bits, double softcap) {
  Case c;
  c.problem = make_problem(std::vector<std::int64_t>{2, 37, 4, 32}, std::vector<std::int64_t>{2, 50, 2, 32},
                           std::vector<std::int64_t>{2, 50, 2, 16},
                           {.dtype = dtype, .mask = mask, .modifiers = sweep_modifiers(bits, softcap)});
  std::mt19937 rng(11);
  c.q = random_bits(q_extent(c.problem), dtype, rng);
  c.k = random_bits(k_extent(c.problem), dtype, rng);
  c.v = random_bits(v_extent(c.problem), dtype, rng);
  c.d_o = random_bits(o_extent(c.problem), dtype, rng);
  c.modifiers = modifier_inputs(c.problem, rng);
  return c;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Each modifier on its own and all three (a small c, so the cap bends the scores).
TEST(NaiveBackwardTest, WithModifiersItIsNearTheReferenceAndFarFromIgnoringThem) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (std::uint8_t bits : {kModSoftcap, kModSinks, kModAlibi, kModAll}) {
      const Case c = make_case(dtype, Mask::causal_bottom_right(), bits, 2.0);
      const AttentionProblem& p = c.problem;
      AttentionProblem plain = p;
      plain.modifiers = {};
      const ModifierTensors mods = c.modifiers.host();
      const ReferenceGradients want = reference_backward(p, c.q.data(), c.k.data(), c.v.data(), c.d_o.data(), mods);
      const ReferenceGradients want0 = reference_backward(plain, c.q.data(), c.k.data(), c.v.data(), c.d_o.data());
      const ReferenceGradients naive0 = naive_storage_backward(plain, c.q.data(), c.k.data(), c.v.data(), c.d_o.data());
      const ReferenceGradients naive =
          naive_storage_backward(p, c.q.data(), c.k.data(), c.v.data(), c.d_o.data(), mods);
      for (const auto& [name, got, wanted, got0, wanted0] :
           {std::tuple{"dQ", &naive.dq, &want.dq, &naive0.dq, &want0.dq},
            std::tuple{"dK", &naive.dk, &want.dk, &naive0.dk, &want0.dk},
            std::tuple{"dV", &naive.dv, &want.dv, &naive0.dv, &want0.dv}}) {
        const std::string what = std::string(to_string(dtype)) + " " + modifier_names(bits) + " " + name;
        const double error = max_difference(*got, *wanted);
        EXPECT_GT(error, 0) << what;
        EXPECT_LT(error, 4 * max_difference(*got0, *wanted0)) << what;
        EXPECT_GT(max_difference(*got0, *wanted), 4 * error) << what << ": ignoring the modifiers is as near";
      }
    }
  }
}

}  // namespace
}  // namespace attune::tuner
