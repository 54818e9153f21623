// The fp64 reference of backward attention: the oracle for the gradients of
// the forward in reference/reference.h.
//
// Example:
//   const attune::ReferenceGradients g = attune::reference_backward(problem, q, k, v, d_o, {.sinks = sinks});
//   const double dk0 = g.dk[attune::reference_dk_index(problem, /*b=*/0, /*row=*/0, /*head=*/0)];
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace attune {

// Gradients of the loss sum(dO * O) with respect to Q, K and V, always
// contiguous whatever the problem's input strides:
//   dq [B, Sq, Hq, Dk], dk [B, Sk, Hkv, Dk], dv [B, Sk, Hkv, Dv]
//   (packed: dq [Tq, Hq, Dk], dk [Tk, Hkv, Dk], dv [Tk, Hkv, Dv]),
// and with respect to the sinks when the problem uses them.
// Under GQA/MQA dk and dv sum over the query heads that share a kv head.
// Rows with no visible key contribute nothing, so their dq is 0 exactly, as
// are dk and dv of keys no row sees (padding included). Never NaN.
struct ReferenceGradients {
  std::vector<double> dq;
  std::vector<double> dk;
  std::vector<double> dv;
  std::vector<double> dsink;  // [Hq] with sinks, else empty
};

// Backward attention in fp64 from fp64 values (problem.dtype is ignored):
// Q, K and V read with the problem's strides, dO contiguous and laid out like
// ReferenceOutput::o ([B, Sq, Hq, Dv], packed [Tq, Hq, Dv]); `modifiers` as
// for reference_forward. Recomputes the forward (O, and LSE with the sink),
// then per row i with visible keys j, x_ij = scale * q_i.k_j and s_ij its
// modified score (docs/contract.md, "Score modifiers") and w_ij its dropout
// weight (ModifierValues::dropout_weight: 0 or 1 / (1 - p); 1 without
// dropout, "Dropout"):
//   P_ij = exp(s_ij - LSE_i) (LSE without dropout), D_i = dO_i . O_i (O with it),
//   dP_ij = w_ij (dO_i . v_j), dS_ij = P_ij (dP_ij - D_i),
//   dX_ij = dS_ij (1 - tanh^2(x_ij / c)) with softcap c, else dS_ij,
//   dq_i = scale * sum_j dX_ij k_j, dk_j += scale * dX_ij q_i, dv_j += P_ij w_ij dO_i,
//   dsink_h = -sum over every row (b, i) of head h of exp(sink_h - LSE_i) D_i.
// ALiBi slopes are constants: they get no gradient.
ReferenceGradients reference_backward(const AttentionProblem& problem, const double* q, const double* k,
                                      const double* v, const double* d_o, const ModifierTensors& modifiers = {});

// The same from Q, K, V and dO stored in problem.dtype (16-bit patterns) in
// host memory: Q, K and V read with the problem's strides, dO contiguous as
// above.
ReferenceGradients reference_backward(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                                      const std::uint16_t* v, const std::uint16_t* d_o,
                                      const ModifierTensors& modifiers = {});

// Index of the first element of dq row (b, row, head) and of dk / dv row
// (b, row, kv_head) in a ReferenceGradients; `row` is the global row
// (packed: offset by SequenceExtent::q_begin for dq, k_begin for dk and dv).
int64_t reference_dq_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);
int64_t reference_dk_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t kv_head);
int64_t reference_dv_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t kv_head);

}  // namespace attune
