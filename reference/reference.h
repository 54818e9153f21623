// The fp64 dense reference of forward attention: the oracle every backend and
// variant is checked against.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/problem.h"
#include "templates/dropout.h"

namespace attune {

// Dense outputs of the reference, always contiguous whatever the problem's
// output strides: O [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] (packed: O [Tq, Hq, Dv],
// LSE [Hq, Tq]). Rows with no visible key: O = 0 exactly, LSE = -inf (with
// sinks: LSE = sink_h).
struct ReferenceOutput {
  std::vector<double> o;
  std::vector<double> lse;
};

// A problem's score modifiers bound to their values (docs/contract.md, "Score
// modifiers"): the one formula the forward, backward and tiled references
// share, and the dropout weight of each probability ("Dropout"). The
// constructor checks the values (check_modifier_values: a tensor the problem
// uses is non-null and finite; throws InvalidArgument).
//
// Example, the score of row i and key j of sequence b in head h, and what
// its probability is multiplied by in O:
//   const attune::ModifierValues mods(problem, {.sinks = sinks});
//   const double s = mods.cap(scale * dot) + mods.bias(b, h, i, j, problem.sequence(b));
//   const double w = mods.dropout_weight(b, h, i, j);
class ModifierValues {
 public:
  ModifierValues(const AttentionProblem& problem, const ModifierTensors& tensors);

  // c tanh(x / c) for the scaled score x = scale q_i.k_j with softcap c; x without.
  double cap(double x) const;
  // d cap(x) / dx = 1 - tanh^2(x / c); 1 without softcap.
  double cap_gradient(double x) const;
  // The ALiBi term -slope_{b,h} |i + Sk - Sq - j| of row i and key j (local
  // positions; Sq, Sk the sequence's q_len and k_len); 0 without ALiBi.
  double bias(int64_t b, int64_t h, int64_t i, int64_t j, const SequenceExtent& seq) const;
  bool has_sinks() const { return sinks_ != nullptr; }
  // The sink logit of query head h; -inf without sinks (a term e^-inf = 0).
  double sink(int64_t h) const;
  // The dropout weight of row i and key j (local positions) of sequence b in
  // query head h: 1 / (1 - p) where dropout_keeps keeps the element, 0 where
  // it drops it; 1 without dropout (p = 0).
  double dropout_weight(int64_t b, int64_t h, int64_t i, int64_t j) const;
  bool has_dropout() const { return dropout_; }

 private:
  double softcap_;
  const float* sinks_;          // null without sinks
  const float* alibi_slopes_;   // null without ALiBi
  int64_t slope_batch_stride_;  // Hq for [B, Hq] slopes, 0 for [Hq]
  bool dropout_;
  DropoutParams dropout_params_;  // the problem's p, seed and offset, as the kernels take them
  double keep_scale_;             // 1 / (1 - p) in fp64 (the kernels' keep_scale is its float32 rounding)
  int64_t heads_;                 // Hq: the batch stride of the Philox counter's head word
};

// Forward attention in fp64 from Q, K and V stored in problem.dtype (16-bit
// patterns) in host memory, read with the problem's strides (a paged cache
// through its block table). `modifiers` holds the host tensors of the
// problem's score modifiers (sinks, ALiBi slopes) it uses. fp8 inputs
// (problem.dtype or kv_dtype e4m3 / e5m2) hold one element per 16-bit slot,
// its byte in the low 8 bits (as float_to_bits writes it; see
// storage_bytes), and are computed on exactly as dequantize_inputs gives
// them: each stored value times its descale from `modifiers`.
// With dropout (problem.modifiers.dropout_p > 0), O_i = sum_j P_ij w_ij v_j
// with P the softmax without dropout and w_ij = dropout_weight(b, h, i, j);
// LSE is the one without dropout, as the kernels save it for the backward.
ReferenceOutput reference_forward(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v, const ModifierTensors& modifiers = {});

// The same from fp64 values (problem.dtype is ignored): the exact
// mathematical function, for tests that need values no 16-bit format holds.
// Contiguous K and V only.
ReferenceOutput reference_forward(const AttentionProblem& problem, const double* q, const double* k, const double* v,
                                  const ModifierTensors& modifiers = {});

// fp8 inputs as the fp64 values they stand for: each element (Q in
// problem.dtype, K and V in its k_dtype(), one per 16-bit slot) times its
// descale at [b, kv_head] (null: 1), with a paged cache gathered into
// contiguous [B, Sk, Hkv, D] (unpage_kv). The problem returned has those
// layouts; it keeps its dtypes, which the fp64 reference ignores.
struct DequantizedInputs {
  AttentionProblem problem;
  std::vector<double> q;
  std::vector<double> k;
  std::vector<double> v;
};
DequantizedInputs dequantize_inputs(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                                    const std::uint16_t* v, const ModifierTensors& descales);

// Index of O row (b, row, head) and of LSE entry (b, head, row) in a
// ReferenceOutput; `row` is the global row (packed: offset by q_begin).
int64_t reference_o_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);
int64_t reference_lse_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);

}  // namespace attune
