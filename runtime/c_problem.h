// attune_problem (the C API's struct, runtime/attune_c.h) as an
// AttentionProblem: what every C entry point does first, apart so that it can
// be tested and fuzzed without a runtime.
#pragma once

#include <optional>

#include "core/problem.h"
#include "runtime/attune_c.h"

namespace attune {

// Converts; the runtime call or reference it is handed to validates it (once
// per call). Length arrays are read for the counts the struct gives (batch,
// batch + 1, batch x max_pages), so those counts are checked here: throws
// InvalidArgument naming the field, the value and what was expected.
// With `device_lengths` the length arrays stay in device memory: the
// struct's must be NULL (a paged cache gives max_pages without a table),
// and the bounds say which arrays each run passes.
AttentionProblem problem_from_c(const attune_problem& c, const std::optional<LengthBounds>& device_lengths = {});

// `buffers` with the problem's fp8 descales (the direct calls pass them in
// the problem, as the modifiers' tensors).
inline AttentionBuffers with_descales(AttentionBuffers buffers, const attune_problem& c) {
  buffers.q_descale = c.q_descale;
  buffers.k_descale = c.k_descale;
  buffers.v_descale = c.v_descale;
  return buffers;
}

}  // namespace attune
