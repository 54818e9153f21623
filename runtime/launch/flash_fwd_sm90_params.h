// From the operator contract to the Hopper forward kernel's launch: whether a
// call fits flash_fwd_sm90 (else flash_fwd runs it), the four tensor maps,
// the params struct, grid and block.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/problem.h"
#include "core/tensor_map.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "templates/flash_fwd_sm90.cuh"

namespace attune {

// Whether the kCluster variant pairs the call's m-blocks across 2 x 1
// clusters with K and V multicast: two adjacent m-blocks see the same keys,
// all of them in the tensor (no mask, fixed lengths, 16-bit inputs) and
// the m-block count is even. Otherwise its blocks run alone, as kStatic.
bool flash_fwd_sm90_pairs(const AttentionProblem& problem, const Variant& variant);

// Why a call cannot run on flash_fwd_sm90 (sm90_fit, generator/variants.h) with its
// pointers too: TMA needs 16-byte aligned Q, K and V. Empty when it can.
std::string sm90_unfit_reason(const AttentionProblem& problem, const AttentionBuffers& buffers);

// A tensor [batch, rows, heads, head dim] of 16-bit (or, `bytes` 1, e4m3)
// elements as a 4-D TMA map (head dim, rows, heads, batch), 128-byte
// swizzle, boxes of 128-byte rows by `box_rows`; a packed tensor (or a batch
// of one) is one sequence of batch 1. The Hopper kernels' maps.
TensorMapSpec sm90_tensor_map(const void* base, const TensorStrides& strides, bool packed, std::int64_t batch,
                              std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::uint32_t box_rows,
                              int bytes = 2);

// The tensor maps of a call: Q, K, V and O as 4-D tensors (head dim, rows,
// heads, batch; packed tensors as batch 1), 128-byte swizzle, boxes of
// 128-byte rows (64 16-bit or 128 e4m3 head-dim columns) by the variant's
// rows (Q), keys (K, V) or 64 rows (O).
struct Sm90TensorMaps {
  TensorMapSpec q, k, v, o;
};
Sm90TensorMaps flash_fwd_sm90_maps(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                   const Variant& variant);

// Kernel params for a validated problem that fits; `encode` turns a spec
// into the backend's TensorMap (LaunchBackend::tensor_map).
// `scheduler_workspace`: the dynamic and varlen schedulers' state
// (flash_fwd_sm90_workspace_bytes: the counter, zero at launch, and the
// varlen numbers), null for the others.
template <class Encode>
FlashFwdSm90Params flash_fwd_sm90_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                         const DeviceMetadata& metadata, const Variant& variant,
                                         void* scheduler_workspace, const Encode& encode);
FlashFwdSm90Params flash_fwd_sm90_params_without_maps(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                      const DeviceMetadata& metadata, const Variant& variant,
                                                      void* scheduler_workspace);

template <class Encode>
FlashFwdSm90Params flash_fwd_sm90_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                         const DeviceMetadata& metadata, const Variant& variant,
                                         void* scheduler_workspace, const Encode& encode) {
  FlashFwdSm90Params k = flash_fwd_sm90_params_without_maps(problem, buffers, metadata, variant, scheduler_workspace);
  const Sm90TensorMaps maps = flash_fwd_sm90_maps(problem, buffers, variant);
  k.q_map = encode(maps.q);
  if (problem.seqlen_k > 0) {  // else no key tile is ever loaded
    k.k_map = encode(maps.k);
    k.v_map = encode(maps.v);
  }
  if (k.o_map_valid != 0) k.o_map = encode(maps.o);
  return k;
}

// The tiles of a call and their order (templates/sm90_scheduler.cuh):
// query blocks of the longest sequence over every (batch, head), in L2
// sections of the heads whose K and V fit in kL2SectionBytes together.
inline constexpr std::int64_t kL2SectionBytes = std::int64_t{32} << 20;  // of an H100's 50 MiB L2
sm90_sched::TileOrder flash_fwd_sm90_tiles(const AttentionProblem& problem, const Variant& variant);

// A Hopper kernel's tile order: `blocks` per (batch, head) pair (query
// blocks for the forward, key blocks for the backward), `heads` x
// `batches` pairs, `section` pairs to an L2 section (clamped to [1,
// pairs]). InvalidArgument naming `kernel` and the block kind when there
// are more than 2^31 - 1 tiles.
sm90_sched::TileOrder sm90_tile_order(std::string_view kernel, std::string_view blocks_are, std::int64_t blocks,
                                      std::int64_t heads, std::int64_t batches, std::int64_t section);

// Grid over the params' tiles (one CTA per tile, or min(tiles, sm_count)
// for the persistent schedulers; kCluster: 2 x 1 clusters, one per pair of
// m-blocks up to sm_count / 2 when paired), block, cluster and dynamic
// shared memory.
LaunchConfig flash_fwd_sm90_launch(const FlashFwdSm90Params& params, const Variant& variant, int sm_count);

// Bytes of workspace the variant's scheduler needs for the problem: 16
// (its counter, one int32 zeroed before each launch) for kDynamic, the
// counter and the tile numbers (sm90_sched::VarlenLayout) for kVarlen,
// else 0.
std::size_t flash_fwd_sm90_workspace_bytes(const Variant& variant, const AttentionProblem& problem);

// kVarlen: sm90_varlen_tiles numbers the call's tiles into the workspace
// (the params' `varlen`) before the forward runs: one CTA.
const Variant& sm90_varlen_tiles_variant();
Sm90VarlenTilesParams sm90_varlen_tiles_params(const FlashFwdSm90Params& forward, const Variant& variant);
LaunchConfig sm90_varlen_tiles_launch();

}  // namespace attune
