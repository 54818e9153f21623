// merge_states: the public merge of attention results over disjoint keys
// (cascade and shared-prefix attention, context parallelism), FlashInfer's
// merge_state: one warp per output row, by the softmax's rule.
#pragma once

#include "templates/flash_tile.cuh"

namespace attune {

// The public merge of partial results over disjoint keys (cascade and
// shared-prefix attention, context parallelism): `parts` pairs (O_i, LSE_i)
// of the same rows, each a normalized state (O = u / l, LSE = ln l + m), are
// one state by the softmax's rule, with l_i = 1 and m_i = LSE_i log2 e.
// Partials with LSE = -inf (no key) are skipped; a row that every partial
// leaves empty gets O = 0 and LSE = -inf.
inline constexpr int kMaxMergeParts = 16;

struct MergeStatesParams {
  const u16* o[kMaxMergeParts];      // [rows, heads, head_dim] each
  const float* lse[kMaxMergeParts];  // [heads, rows] each (natural log)
  u16* out_o;                        // [rows, heads, head_dim]
  float* out_lse;                    // [heads, rows]; null: not written
  i32 parts;
  i32 rows;
  i32 heads;
  i32 head_dim;
};

struct MergeStatesTunables : WarpPerRowTunables {};

// Grid: (ceil(rows x heads / kWarps)); block: kWarps x 32 threads; one warp
// per (row, head), lanes over the columns as in flash_decode_combine.
template <int kWarps, class DType>
ATTUNE_KERNEL void merge_states(MergeStatesParams p) {
  using D = DType;
  constexpr int kMaxDim = 256;
  constexpr int kColsPerLane = kMaxDim / kWarpSize;
  const i64 slots = static_cast<i64>(p.rows) * p.heads;
  const i64 slot = static_cast<i64>(dev::block_index().x) * kWarps + dev::warp_id();
  if (slot >= slots) return;  // whole warps leave together
  const i64 row = slot / p.heads;
  const i64 head = slot % p.heads;
  const i32 lane = dev::lane_id();
  const i64 offset = slot * p.head_dim;  // (row, head) of [rows, heads, head_dim]

  softmax::LaneRow<kColsPerLane> merged;
  merged.init();
  // Unrolled over every slot: the pointers stay in the parameter bank.
  ATTUNE_UNROLL
  for (int i = 0; i < kMaxMergeParts; ++i) {
    if (i >= p.parts) break;
    const float lse = dev::load_global(p.lse[i] + head * p.rows + row);
    if (!(lse > -dev::infinity())) continue;
    // A normalized part: l_i = 1, m_i = LSE_i in base 2.
    merged.join(lse * kLog2e, 1.0f, lane, p.head_dim,
                [&](i32 col) { return dev::to_float<D>(dev::load_global(p.o[i] + offset + col)); });
  }
  const softmax::RowEnd end = softmax::finalize(merged.m, merged.l);
  merged.store(lane, p.head_dim, end.inv_l,
               [&](i32 col, float value) { dev::store_global(p.out_o + offset + col, dev::to_bits<D>(value)); });
  if (p.out_lse != nullptr && lane == 0) dev::store_global(p.out_lse + head * p.rows + row, end.lse);
}

}  // namespace attune
