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

const Variant& merge_states_variant();
MergeStatesParams merge_states_params(const MergeProblem& problem, std::span<const void* const> o,
                                      std::span<const float* const> lse, void* out_o, float* out_lse);
LaunchConfig merge_states_launch(const MergeProblem& problem);

}  // namespace attune
