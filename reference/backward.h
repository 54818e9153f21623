// The fp64 reference of backward attention: the oracle for the gradients of
// the forward in reference/reference.h.
//
// Example:
//   const attune::ReferenceGradients g = attune::reference_backward(problem, q, k, v, d_o);
//   const double dk0 = g.dk[attune::reference_dk_index(problem, /*b=*/0, /*row=*/0, /*head=*/0)];
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace attune {

// Gradients of the loss sum(dO * O) with respect to Q, K and V, always
// contiguous whatever the problem's input strides:
//   dq [B, Sq, Hq, Dk], dk [B, Sk, Hkv, Dk], dv [B, Sk, Hkv, Dv]
//   (packed: dq [Tq, Hq, Dk], dk [Tk, Hkv, Dk], dv [Tk, Hkv, Dv]).
// Under GQA/MQA dk and dv sum over the query heads that share a kv head.
// Rows with no visible key contribute nothing, so their dq is 0 exactly, as
// are dk and dv of keys no row sees (padding included). Never NaN.
struct ReferenceGradients {
  std::vector<double> dq;
  std::vector<double> dk;
  std::vector<double> dv;
};

// Backward attention in fp64 from fp64 values (problem.dtype is ignored):
// Q, K and V read with the problem's strides, dO contiguous and laid out like
// ReferenceOutput::o ([B, Sq, Hq, Dv], packed [Tq, Hq, Dv]). Recomputes the
// forward, then per row i with visible keys j:
//   P_ij = exp(scale * q_i.k_j - LSE_i), D_i = dO_i . O_i,
//   dS_ij = P_ij (dO_i . v_j - D_i),
//   dq_i = scale * sum_j dS_ij k_j, dk_j += scale * dS_ij q_i, dv_j += P_ij dO_i.
ReferenceGradients reference_backward(const AttentionProblem& problem, const double* q, const double* k,
                                      const double* v, const double* d_o);

// The same from Q, K, V and dO stored in problem.dtype (16-bit patterns) in
// host memory: Q, K and V read with the problem's strides, dO contiguous as
// above.
ReferenceGradients reference_backward(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                                      const std::uint16_t* v, const std::uint16_t* d_o);

// Index of the first element of dq row (b, row, head) and of dk / dv row
// (b, row, kv_head) in a ReferenceGradients; `row` is the global row
// (packed: offset by SequenceExtent::q_begin for dq, k_begin for dk and dv).
int64_t reference_dq_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);
int64_t reference_dk_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t kv_head);
int64_t reference_dv_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t kv_head);

}  // namespace attune
