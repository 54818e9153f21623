// The naive storage-dtype backward of FlashAttention's gradient rule
// (reference/backward_accuracy.h) with the score modifiers, for the tuner's
// correctness gate: the rule's limit is a multiple of the naive error, and
// the naive error of a problem with modifiers is not that of the same
// problem without them (a row that sees one key has no naive error without
// a sink, and steep ALiBi slopes sharpen the softmax). The forward's is
// naive_storage_attention with its ModifierTensors (reference/accuracy.h);
// this follows it: the modifiers apply to the fp32 score before it is
// rounded, and a sink joins the fp32 sum.
//
// Example:
//   const attune::ReferenceGradients naive =
//       attune::tuner::naive_modified_backward(p, q, k, v, d_o, {.sinks = sinks.data()});
//   attune::within_gradient_rule(got, want, naive, p.dtype, 3.0, &why);
#pragma once

#include <cstdint>

#include "reference/backward.h"
#include "reference/reference.h"

namespace attune::tuner {

// naive_storage_backward with the problem's modifiers (`modifiers` as for
// reference_backward): S = r(cap(q' k) + ALiBi term), P = r(softmax(S) with
// the sink's term in the sum), and dS multiplied by the softcap's gradient
// 1 - tanh^2(q' k / c) before it rounds. Without modifiers bit for bit
// naive_storage_backward. dsink is left empty (the gate judges it on its own).
ReferenceGradients naive_modified_backward(const AttentionProblem& problem, const std::uint16_t* q,
                                           const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* d_o,
                                           const ModifierTensors& modifiers);

}  // namespace attune::tuner
