// The built-in choices where nothing is tuned, in one place, written with the
// kernels' named tunables: the default variant of each operation for a
// problem class on an architecture, and the split count of decode.
#pragma once

#include <string_view>

#include "core/problem.h"
#include "generator/variants.h"

namespace attune {

// The default variant of "fwd" or "bwd" (dQ by atomics) for the problem
// class on the architecture: the listed variant nearest the shapes below.
Variant heuristic_variant(std::string_view op, DType dtype, int dk, int dv, const ArchLimits& arch,
                          std::uint8_t modifiers = 0);

// The default flash_bwd variant, with dQ summed per key block in a fixed
// order instead of by atomics when `deterministic`.
Variant heuristic_backward_variant(DType dtype, int dk, int dv, const ArchLimits& arch, bool deterministic = false,
                                   std::uint8_t modifiers = 0);

// The default decode variant of a problem: one 16-row block when the
// (packed) rows of a KV head fit in it, 64 rows otherwise; query heads packed
// per KV head when there is GQA.
Variant heuristic_decode_variant(const AttentionProblem& problem, const ArchLimits& arch);

// The default split count: enough CTAs to fill `sm_count` SMs in whole
// waves, never more splits than key tiles of the longest cache.
int heuristic_splits(const AttentionProblem& problem, const Variant& variant, int sm_count);

}  // namespace attune
