// From the operator contract to the Hopper forward kernel's launch: whether a
// call fits flash_fwd_sm90 (else flash_fwd runs it), the four tensor maps,
// the params struct, grid and block.
#pragma once

#include <string>

#include "core/problem.h"
#include "core/tensor_map.h"
#include "emulator/launch.h"
#include "generator/variants.h"
#include "templates/flash_fwd_sm90.cuh"

namespace attune {

// Why a call cannot run on flash_fwd_sm90 (sm90_fit, generator/variants.h) with its
// pointers too: TMA needs 16-byte aligned Q, K and V. Empty when it can.
std::string sm90_unfit_reason(const AttentionProblem& problem, const AttentionBuffers& buffers);

// The tensor maps of a call: Q, K, V and O as 4-D tensors (head dim, rows,
// heads, batch; packed tensors as batch 1), 128-byte swizzle, boxes of 64
// head-dim columns by the variant's rows (Q), keys (K, V) or 64 rows (O).
struct Sm90TensorMaps {
  TensorMapSpec q, k, v, o;
};
Sm90TensorMaps flash_fwd_sm90_maps(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                   const Variant& variant);

// Kernel params for a validated problem that fits; `encode` turns a spec
// into the backend's TensorMap (LaunchBackend::tensor_map).
template <class Encode>
FlashFwdSm90Params flash_fwd_sm90_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                         const DeviceMetadata& metadata, const Variant& variant, const Encode& encode);
FlashFwdSm90Params flash_fwd_sm90_params_without_maps(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                      const DeviceMetadata& metadata, const Variant& variant);

template <class Encode>
FlashFwdSm90Params flash_fwd_sm90_params(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                         const DeviceMetadata& metadata, const Variant& variant, const Encode& encode) {
  FlashFwdSm90Params k = flash_fwd_sm90_params_without_maps(problem, buffers, metadata, variant);
  const Sm90TensorMaps maps = flash_fwd_sm90_maps(problem, buffers, variant);
  k.q_map = encode(maps.q);
  if (problem.seqlen_k > 0) {  // else no key tile is ever loaded
    k.k_map = encode(maps.k);
    k.v_map = encode(maps.v);
  }
  if (k.o_map_valid != 0) k.o_map = encode(maps.o);
  return k;
}

// Grid (query blocks, Hq, B), block and dynamic shared memory.
LaunchConfig flash_fwd_sm90_launch(const AttentionProblem& problem, const Variant& variant);

}  // namespace attune
