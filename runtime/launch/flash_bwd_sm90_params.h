// From the operator contract to the Hopper backward kernel's launch: whether
// a call fits flash_bwd_sm90 (else flash_bwd runs it), its four tensor maps,
// the params struct. Its grid and the preprocess and convert kernels around
// it are flash_bwd's (flash_bwd_params.h).
#pragma once

#include <string>

#include "core/problem.h"
#include "core/tensor_map.h"
#include "emulator/launch.h"
#include "generated/kernel_shapes.h"
#include "generator/variants.h"
#include "templates/flash_bwd_sm90.cuh"

namespace attune {

// Why a backward call cannot run on flash_bwd_sm90: what keeps it off the
// Hopper forward (sm90_fit: score modifiers, strides TMA cannot step, head
// dims past the family's), dropout, or a tensor (Q, K, V, dO) off 16-byte
// alignment. Empty when it can.
std::string bwd_sm90_unfit_reason(const AttentionProblem& problem, const BackwardBuffers& buffers);

// Q, K, V and dO as 4-D maps (sm90_tensor_map): boxes of the variant's query
// rows (Q, dO) and keys (K, V).
struct Sm90BackwardMaps {
  TensorMapSpec q, k, v, d_o;
};
Sm90BackwardMaps flash_bwd_sm90_maps(const AttentionProblem& problem, const BackwardBuffers& buffers,
                                     const Variant& variant);

// The CTAs' order: key blocks x KV heads x B, in L2 sections of (batch,
// KV head) pairs whose Q and dO (every query head of the group) fit in
// kL2SectionBytes together.
sm90_sched::TileOrder flash_bwd_sm90_tiles(const AttentionProblem& problem, const Variant& variant);

// The CTAs that run `tiles` (each runs tiles c, c + G, ...): persistent,
// min(tiles, sm_count), when every key block has the same steps (no causal
// or windowed mask, one length for every sequence), so that a CTA's next K
// and V load while it finishes its last tile; one per tile otherwise, where
// the hardware starts each next tile (longest first) on the first SM free,
// which balances unequal tiles better than a fixed share.
i32 flash_bwd_sm90_ctas(const AttentionProblem& problem, const sm90_sched::TileOrder& tiles, int sm_count);
// Its launch over `tiles` (the params' own, so they are not computed twice).
LaunchConfig flash_bwd_sm90_launch(const AttentionProblem& problem, const sm90_sched::TileOrder& tiles,
                                   const Variant& variant, int sm_count);

// The fp32 dQ accumulator as a 5-D map for the TMA reductions (kDqTma):
// (Dk, b, c, a, Hq) for workspace row 8 a + 4 b + c, boxes of 32 columns
// (128 bytes, swizzled) by 64 rows by one head, each sequence's rows
// starting on a box (bwd_detail::sequence). Row r of a box lands in the
// box's shared-memory row 8 (r / 8) + 2 (r % 4) + (r % 8) / 4: the
// consumers' 8-byte stores of rows r and r + 1 (one half-warp) then take
// different chunks under the 128-byte swizzle, where in row order they
// took the same two (a 2-way bank conflict).
TensorMapSpec dq_accumulator_map(const FlashBwdParams& bwd);

// Kernel params for a validated problem that fits: `bwd` is the row
// kernels' params (flash_bwd_params); `encode` turns a spec into the
// backend's TensorMap (LaunchBackend::tensor_map).
template <class Encode>
FlashBwdSm90Params flash_bwd_sm90_params(const AttentionProblem& problem, const BackwardBuffers& buffers,
                                         const FlashBwdParams& bwd, const Variant& variant, const Encode& encode) {
  FlashBwdSm90Params k{};
  k.bwd = bwd;
  fill_tunable_fields(k, FlashBwdSm90Shape::of(variant));
  k.tiles = flash_bwd_sm90_tiles(problem, variant);
  if (bwd.mods.softcap > 0.0f) {  // the kernel's float arithmetic (block_score_mods)
    k.softcap_in = bwd.scale_log2 / (bwd.mods.softcap * kLog2e);
    k.softcap_out = bwd.mods.softcap * kLog2e;
  }
  if (problem.seqlen_q > 0 && problem.seqlen_k > 0) {  // else no tile is ever loaded
    const Sm90BackwardMaps maps = flash_bwd_sm90_maps(problem, buffers, variant);
    k.q_map = encode(maps.q);
    k.k_map = encode(maps.k);
    k.v_map = encode(maps.v);
    k.do_map = encode(maps.d_o);
  }
  if (bwd.dq_accum != nullptr && bwd.rows > 0) k.dq_map = encode(dq_accumulator_map(bwd));
  return k;
}

// Its grid: flash_bwd_sm90_ctas (flash_bwd_launch, flash_bwd_params.h,
// launches either family).

}  // namespace attune
