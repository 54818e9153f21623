// From the operator contract to the forward kernel's launch: params struct,
// grid and block.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "runtime/launch/kernel_params.h"
#include "templates/flash_fwd.cuh"

namespace attune {

// Kernel params for a validated problem; buffers hold 16-bit Q, K, V, O.
FlashFwdParams flash_fwd_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                const DeviceMetadata& metadata);

// Grid (query blocks, Hq, B), block and dynamic shared memory of a
// flash_fwd variant.
LaunchConfig flash_fwd_launch(const AttentionProblem& problem, const Variant& variant);
// The same grid for any forward family whose blocks own `block_m` query rows.
LaunchConfig query_block_launch(const AttentionProblem& problem, const Variant& variant, std::int64_t block_m);

}  // namespace attune
