// From a merge of partial attention results to the merge_states kernel's
// launch: params, grid and block.
#pragma once

#include <cstdint>
#include <span>

#include "core/problem.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "templates/merge_states.cuh"

namespace attune {

// Checks sizes and pointers (InvalidArgument naming the value and what was
// expected): 1..kMaxMergeParts parts, head_dim 1..256, every input and
// out_o set when there are elements.
void validate(const MergeProblem& problem, std::span<const void* const> o, std::span<const float* const> lse,
              const void* out_o);

const Variant& merge_states_variant();
MergeStatesParams merge_states_params(const MergeProblem& problem, std::span<const void* const> o,
                                      std::span<const float* const> lse, void* out_o, float* out_lse);
LaunchConfig merge_states_launch(const MergeProblem& problem);

}  // namespace attune
