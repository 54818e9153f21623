// FlashAttention's accuracy rule for gradients: a kernel's dQ, dK and dV
// may be off the fp64 oracle (reference_backward) by at most a multiple of
// the error of the same backward computed naively in the storage dtype, plus
// a floor. Used by the backward kernel tests; fit for a correctness gate.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/backward.h"
#include "reference/reference.h"

namespace attune {

// Backward attention as a framework's autograd computes it in the storage
// dtype (FlashAttention's test with upcast off): products accumulate in fp32
// and round to the dtype, and so do the softmax and its backward:
//   q' = r(scale q), S = r(q' k), P = r(softmax(S)),
//   dV = r(sum_i P_ij dO_i), dP = r(dO_i . v_j), dS = r(P (dP - sum_j P dP)),
//   dQ = r(scale r(sum_j dS_ij k_j)), dK = r(sum_i dS_ij q'_i).
// Under GQA the query heads' dK and dV sum in fp32 before the last rounding.
// Inputs as reference_backward's storage overload: Q, K, V with the
// problem's strides, dO contiguous [B, Sq, Hq, Dv] (packed [Tq, Hq, Dv]);
// the result in ReferenceGradients' layout.
// With score modifiers (`modifiers` as for reference_backward) they apply
// to the fp32 score before it rounds, S = r(cap(q' k) + ALiBi term), the
// sink joins the fp32 softmax sum, and dS takes the softcap's gradient
// 1 - tanh^2 before it rounds. dsink is left empty. With dropout (weights
// w_ij of ModifierValues::dropout_weight, in float32) as autograd's dropout
// node: P' = r(P w) multiplies V (dV = r(sum_i P'_ij dO_i)) and the softmax
// backward reads dP = r(r(dO_i . v_j) w).
ReferenceGradients naive_storage_backward(const AttentionProblem& p, const std::uint16_t* q_bits,
                                          const std::uint16_t* k_bits, const std::uint16_t* v_bits,
                                          const std::uint16_t* do_bits, const ModifierTensors& modifiers = {});

struct GradientErrors {
  double dq = 0;         // max |dQ - dQ_ref|
  double dk = 0;         // max |dK - dK_ref|
  double dv = 0;         // max |dV - dV_ref|
  std::string mismatch;  // the first NaN or infinity; empty if none
};

inline GradientErrors gradient_errors(const ReferenceGradients& got, const ReferenceGradients& want) {
  GradientErrors e;
  const auto max_error = [&](const std::vector<double>& g, const std::vector<double>& w, const char* name) {
    double worst = 0;
    for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
      if (!std::isfinite(g[i])) {
        if (e.mismatch.empty())
          e.mismatch = std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(g[i]);
        continue;
      }
      worst = std::max(worst, std::abs(g[i] - w[i]));
    }
    if (g.size() != w.size() && e.mismatch.empty()) {
      e.mismatch =
          std::string(name) + " has " + std::to_string(g.size()) + " elements, want " + std::to_string(w.size());
    }
    return worst;
  };
  e.dq = max_error(got.dq, want.dq, "dQ");
  e.dk = max_error(got.dk, want.dk, "dK");
  e.dv = max_error(got.dv, want.dv, "dV");
  return e;
}

// The floor of the rule for one gradient: twice the rounding error the
// storage dtype makes on values of the reference's size, FlashAttention 3's
// atol = 2 * max |(ref + 0.3 - 0.3) - ref| with every step rounded, plus 1e-6.
inline double gradient_floor(DType dtype, const std::vector<double>& want) {
  double worst = 0;
  for (double x : want) {
    const float ref = round_to(dtype, static_cast<float>(x));
    const float shifted = round_to(dtype, round_to(dtype, ref + 0.3F) - 0.3F);
    worst = std::max(worst, std::abs(static_cast<double>(shifted) - static_cast<double>(ref)));
  }
  return 2 * worst + 1e-6;
}

// True when `got` passes the rule: for each of dQ, dK and dV, error <=
// factor x the naive error + the floor, and no NaN or infinity anywhere.
// `why` explains a failure.
inline bool within_gradient_rule(const ReferenceGradients& got, const ReferenceGradients& want,
                                 const ReferenceGradients& naive, DType dtype, double factor, std::string* why) {
  const GradientErrors g = gradient_errors(got, want);
  const GradientErrors n = gradient_errors(naive, want);
  if (!g.mismatch.empty()) {
    *why = g.mismatch;
    return false;
  }
  const double limits[] = {factor * n.dq + gradient_floor(dtype, want.dq),
                           factor * n.dk + gradient_floor(dtype, want.dk),
                           factor * n.dv + gradient_floor(dtype, want.dv)};
  const double errors[] = {g.dq, g.dk, g.dv};
  const char* names[] = {"dQ", "dK", "dV"};
  bool ok = true;
  *why = "";
  for (int i = 0; i < 3; ++i) {
    if (errors[i] > limits[i]) {
      ok = false;
      *why += std::string(names[i]) + " error " + std::to_string(errors[i]) + " (limit " + std::to_string(limits[i]) +
              ", naive " +
              std::to_string(i == 0   ? n.dq
                             : i == 1 ? n.dk
                                      : n.dv) +
              ") ";
    }
  }
  return ok;
}

}  // namespace attune
