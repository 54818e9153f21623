// From an append to a KV cache (core/append_problem.h) to the kv_append
// kernel's launch: params, grid and block.
#pragma once

#include "core/append_problem.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "templates/kv_append.cuh"

namespace attune {

const Variant& kv_append_variant();
// Params for a validated problem (validate(AppendProblem, AppendBuffers)).
KvAppendParams kv_append_params(const AppendProblem& problem, const AppendBuffers& buffers);
// One warp per new (key, KV head) row and per (query row, head) rotated.
LaunchConfig kv_append_launch(const AppendProblem& problem);

}  // namespace attune
