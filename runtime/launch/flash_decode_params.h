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

// The split-KV decode kernels serve inference: a problem with dropout
// throws InvalidArgument (the forward kernels have it).
void check_decode_features(const AttentionProblem& problem);

// Floats of the workspace the splits write: splits x B x Hq x max_seqlen_q
// x (Dv + 2); 0 with one split (the decode kernel then writes O directly).
std::int64_t decode_workspace_floats(const AttentionProblem& problem, int splits);

// The metadata it reads: `seqlens_k` as the cache lengths, the block table,
// and cu_seqlens_q for packed queries. `split_tiles` > 0 fixes the key
// tiles of each split (fixed_split).
FlashDecodeParams flash_decode_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                      const DeviceMetadata& metadata, int splits, float* workspace,
                                      int split_tiles = 0);
LaunchConfig flash_decode_launch(const AttentionProblem& problem, const Variant& variant, int splits);

// The longest cache of the call: the most keys any split count divides.
std::int64_t longest_cache(const AttentionProblem& problem);

// A fixed split size: every split of every sequence covers `split_size`
// keys (rounded up to whole key tiles of `variant`), so where a sequence's
// keys are cut depends on its own length only, never on the rest of the
// batch. The split count covers the longest cache; InvalidArgument when it
// would pass kMaxDecodeSplits or `split_size` < 1.
struct DecodeSplit {
  int splits = 1;
  int split_tiles = 0;  // 0: each sequence's tiles in `splits` equal parts
};
DecodeSplit fixed_split(const AttentionProblem& problem, const Variant& variant, std::int64_t split_size);

// The combine kernel (flash_decode_combine) for the same call: with the
// sinks compiled in when `modifiers` (the main variant's) has them.
const Variant& decode_combine_variant(std::uint8_t modifiers = 0);
FlashDecodeCombineParams flash_decode_combine_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                     const DeviceMetadata& metadata, int splits,
                                                     const float* workspace);
LaunchConfig flash_decode_combine_launch(const AttentionProblem& problem);

}  // namespace attune
