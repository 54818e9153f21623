// From the operator contract to the backward kernels' launches: the params
// the three kernels share (flash_bwd_preprocess, flash_bwd,
// flash_bwd_dq_convert), their grids, the fp32 workspaces and the built-in
// choice of a flash_bwd variant.
//
// Example (one call, device or host memory alike; launch/ops.cpp does this):
//   const attune::BackwardWorkspace sizes = attune::backward_workspace(problem, variant);
//   // allocate sizes.total_floats() floats at `ws`
//   const attune::FlashBwdParams p = attune::flash_bwd_params(problem, buffers, metadata, variant,
//                                                             attune::split_workspace(sizes, ws));
//   launch preprocess, main and convert with flash_bwd_*_launch(problem, ...) in that order.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/launch.h"
#include "generated/kernel_shapes.h"
#include "generator/variants.h"
#include "runtime/launch/flash_fwd_params.h"
#include "templates/flash_bwd_rows.cuh"

namespace attune {

// 4-byte words of each workspace of a backward call whose main kernel is
// `main` (a flash_bwd or flash_bwd_sm90 variant): D [Hq, rows], and the dQ
// accumulation of the variant:
//   flash_bwd kDqAtomic = 1, flash_bwd_sm90 kDqAtomic = 1: the fp32
//     accumulator [rows, Hq, Dk], added to by atomics;
//   flash_bwd kDqAtomic = 0 (deterministic): one dQ slice per key block
//     [key blocks, rows, Hq, Dk], summed in order by the convert;
//   flash_bwd_sm90 kDqAtomic = 0 (deterministic): the accumulator, and one
//     int32 turn counter per query tile [B, Hq, ceil(longest Sq / 64)]: the
//     key blocks add to it in turn, last key block first;
// where rows = B x round_up(Sq, 64) (round_up(Tq + 64 B, 64) packed; bwd_detail::sequence) and key blocks =
// ceil(longest key capacity / BLOCK_N).
struct BackwardWorkspace {
  std::int64_t d_floats = 0;
  std::int64_t dq_accum_floats = 0;
  std::int64_t dq_partial_floats = 0;
  std::int64_t dq_turn_ints = 0;
  std::int32_t dq_turn_tiles = 0;  // query tiles per (sequence, head)
  std::int64_t total_floats() const { return d_floats + dq_accum_floats + dq_partial_floats + dq_turn_ints; }
};
BackwardWorkspace backward_workspace(const AttentionProblem& problem, const Variant& main);

// The workspace pointers inside one allocation of total_floats() floats
// (null where a workspace is not used).
struct BackwardWorkspacePointers {
  float* d = nullptr;
  float* dq_accum = nullptr;
  float* dq_partial = nullptr;
  i32* dq_turns = nullptr;
  i32 dq_turn_tiles = 0;
};
BackwardWorkspacePointers split_workspace(const BackwardWorkspace& sizes, float* base);

// Kernel params for a validated problem (the same struct for the row
// kernels and flash_bwd; flash_bwd_sm90 holds it); `main` is the variant
// that runs the main kernel.
FlashBwdParams flash_bwd_params(const AttentionProblem& problem, const BackwardBuffers& buffers,
                                const DeviceMetadata& metadata, const Variant& main,
                                const BackwardWorkspacePointers& workspace);

// Key blocks of the main kernel (its grid's x extent): ceil(longest key
// capacity of a sequence / BLOCK_N), at least 1.
std::int64_t backward_key_blocks(const AttentionProblem& problem, int block_n);

// Grid, block and shared memory of a flash_bwd variant (key blocks, Hkv, B)
// or a flash_bwd_sm90 variant (its tiles in order, flash_bwd_sm90_tiles).
// `sm_count`: the device's multiprocessors (flash_bwd_sm90_ctas).
LaunchConfig flash_bwd_launch(const AttentionProblem& problem, const Variant& variant, int sm_count);

// The row kernels (one variant each, one warp per query row of a head):
// grid (ceil(most query rows / warps), Hq, B).
const Variant& bwd_preprocess_variant();
const Variant& bwd_dq_convert_variant();
LaunchConfig flash_bwd_row_launch(const AttentionProblem& problem, const Variant& row_variant);

// With sinks: the dsink reduction (flash_bwd_dsink), one warp per query
// head, grid (ceil(Hq / warps)).
const Variant& bwd_dsink_variant();
LaunchConfig flash_bwd_dsink_launch(const AttentionProblem& problem);

}  // namespace attune
