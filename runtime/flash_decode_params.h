// From the operator contract to the split-KV decode kernels' launches: the
// decode kernel's params and grid, the combine kernel's, the workspace the
// splits share, and the built-in choice of the split count.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "templates/flash_decode.cuh"

namespace attune {

// Device copies of the problem's cache lengths and block table (null where
// the problem has none).
struct DecodeDeviceArrays {
  const std::int32_t* cache_seqlens = nullptr;
  const std::int32_t* block_table = nullptr;
};

// Most splits a call may ask for.
inline constexpr int kMaxDecodeSplits = 256;

// Checks a split count (1..kMaxDecodeSplits); throws InvalidArgument.
void check_splits(int splits);

// Floats of the workspace the splits write: splits x B x Hq x Sq x (Dv + 2);
// 0 with one split (the decode kernel then writes O directly).
std::int64_t decode_workspace_floats(const AttentionProblem& problem, int splits);

FlashDecodeParams flash_decode_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                      const DecodeDeviceArrays& arrays, int splits, float* workspace);
LaunchConfig flash_decode_launch(const AttentionProblem& problem, const Variant& variant, int splits);

// The combine kernel (flash_decode_combine) for the same call.
const Variant& decode_combine_variant();
FlashDecodeCombineParams flash_decode_combine_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                     int splits, const float* workspace);
LaunchConfig flash_decode_combine_launch(const AttentionProblem& problem);

// The built-in decode variant for a problem: one 16-row block when the
// (packed) rows of a KV head fit in it, 64 rows otherwise; query heads packed
// per KV head when there is GQA.
Variant heuristic_decode_variant(const AttentionProblem& problem, const ArchLimits& arch);

// The built-in split count: enough CTAs to fill `sm_count` SMs in whole
// waves, never more splits than key tiles of the longest cache.
int heuristic_splits(const AttentionProblem& problem, const Variant& variant, int sm_count);

}  // namespace attune
