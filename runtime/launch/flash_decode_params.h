// From the operator contract to the split-KV decode kernels' launches: the
// decode kernel's params and grid, the combine kernel's, and the workspace
// the splits share.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "runtime/launch/kernel_params.h"
#include "templates/flash_decode.cuh"

namespace attune {

// Most splits a call may ask for.
inline constexpr int kMaxDecodeSplits = 256;

// Checks a split count (1..kMaxDecodeSplits); throws InvalidArgument.
void check_splits(int splits);

// Floats of the workspace the splits write: splits x B x Hq x Sq x (Dv + 2);
// 0 with one split (the decode kernel then writes O directly).
std::int64_t decode_workspace_floats(const AttentionProblem& problem, int splits);

// The metadata it reads: `seqlens_k` as the cache lengths, and the block table.
FlashDecodeParams flash_decode_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                      const DeviceMetadata& metadata, int splits, float* workspace);
LaunchConfig flash_decode_launch(const AttentionProblem& problem, const Variant& variant, int splits);

// The longest cache of the call: the most keys any split count divides.
std::int64_t longest_cache(const AttentionProblem& problem);

// The combine kernel (flash_decode_combine) for the same call: with the
// sinks compiled in when `modifiers` (the main variant's) has them.
const Variant& decode_combine_variant(std::uint8_t modifiers = 0);
FlashDecodeCombineParams flash_decode_combine_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                     int splits, const float* workspace);
LaunchConfig flash_decode_combine_launch(const AttentionProblem& problem);

}  // namespace attune
