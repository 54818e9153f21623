// From the operator contract to the forward kernel's launch: params struct,
// grid and block.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/launch.h"
#include "templates/flash_fwd.cuh"

namespace attune {

// Copies of the problem's index arrays in the backend's memory (null where
// the problem has none).
struct DeviceLengths {
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  const std::int32_t* seqlens_k = nullptr;
};

// Kernel params for a validated problem; buffers hold 16-bit Q, K, V, O.
FlashFwdParams flash_fwd_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                const DeviceLengths& lengths);

// Most query rows of any sequence: the grid's x extent is this over BLOCK_M.
std::int64_t max_query_rows(const AttentionProblem& problem);

// Grid (query blocks, Hq, B), block and dynamic shared memory of a variant.
LaunchConfig flash_fwd_launch(const AttentionProblem& problem, int block_m, int threads, int shared_bytes);

}  // namespace attune
