// The fp64 dense reference of forward attention: the oracle every backend and
// variant is checked against.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/problem.h"

namespace attune {

// Dense outputs of the reference, always contiguous whatever the problem's
// output strides: O [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] (packed: O [Tq, Hq, Dv],
// LSE [Hq, Tq]). Rows with no visible key: O = 0 exactly, LSE = -inf.
struct ReferenceOutput {
  std::vector<double> o;
  std::vector<double> lse;
};

// Forward attention in fp64 from Q, K and V stored in problem.dtype (16-bit
// patterns) in host memory, read with the problem's strides (a paged cache
// through its block table).
ReferenceOutput reference_forward(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v);

// The same from fp64 values (problem.dtype is ignored): the exact
// mathematical function, for tests that need values no 16-bit format holds.
// Contiguous K and V only.
ReferenceOutput reference_forward(const AttentionProblem& problem, const double* q, const double* k, const double* v);

// Index of O row (b, row, head) and of LSE entry (b, head, row) in a
// ReferenceOutput; `row` is the global row (packed: offset by q_begin).
int64_t reference_o_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);
int64_t reference_lse_index(const AttentionProblem& problem, int64_t b, int64_t row, int64_t head);

}  // namespace attune
