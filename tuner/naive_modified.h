// The naive storage-dtype computations of FlashAttention's accuracy rules
// (reference/accuracy.h, reference/backward_accuracy.h) with the score
// modifiers, for the tuner's correctness gate: the rule's limit is a multiple
// of the naive error, and the naive error of a problem with modifiers is not
// that of the same problem without them (a row that sees one key has no
// naive error without a sink, and steep ALiBi slopes sharpen the softmax).
//
// As a framework computes them in the storage dtype: the scaled score rounded,
// then c tanh(s / c) rounded, then the ALiBi term added and rounded; the sink
// one more softmax term in fp32 (a logit whose value row is zero). Without
// modifiers the results are bit for bit those of reference/.
//
// Example:
//   const attune::ReferenceOutput naive =
//       attune::tuner::naive_modified_attention(p, q, k, v, {.sinks = sinks.data()});
//   attune::within_accuracy_rule(got, want, naive, 2.0, &why);
#pragma once

#include <cstdint>

#include "reference/backward.h"
#include "reference/reference.h"

namespace attune::tuner {

// naive_storage_attention with the problem's modifiers; `modifiers` as for
// reference_forward. Rows with no visible key: O = 0, LSE = -inf (the sink
// with sinks).
ReferenceOutput naive_modified_attention(const AttentionProblem& problem, const std::uint16_t* q,
                                         const std::uint16_t* k, const std::uint16_t* v,
                                         const ModifierTensors& modifiers);

// naive_storage_backward with the problem's modifiers: the softcap's
// gradient 1 - tanh^2(s / c) applied to dS and rounded, as autograd's tanh
// backward does. dsink is left empty (the gate judges it on its own).
ReferenceGradients naive_modified_backward(const AttentionProblem& problem, const std::uint16_t* q,
                                           const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* d_o,
                                           const ModifierTensors& modifiers);

}  // namespace attune::tuner
