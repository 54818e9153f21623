// Which tiles of work the CTAs of the Hopper forward run, and in what order.
//
// A tile is one m-block of one (batch, query head). Every scheduler numbers
// a launch's tiles the same way (TileOrder): the (batch, head) pairs fall in
// L2 sections of `section_heads` pairs whose K and V fit in L2 together, and
// within a section the heaviest m-blocks come first (the last m-block of a
// causal mask sees the most keys), each m-block over the section's heads.
// The schedulers differ in who runs which number:
//   kGrid     one CTA per tile (CTA i runs tile i);
//   kStatic   persistent: grid = min(tiles, SMs), CTA c runs c, c + G, ...;
//   kDynamic  persistent: CTA c runs c, then each number it claims from a
//             global counter, plus G (longest first by construction: the
//             order is heaviest first, and a free CTA takes the next).
//   kVarlen   kDynamic over other numbers (sm90_varlen_tiles.cuh): only
//             tiles that exist, sequences longest first, numbered once
//             per call into the workspace after the counter.
//   kCluster  kStatic over 2 x 1 clusters: where the call allows it
//             (FlashFwdSm90Params::cluster_pairs), a tile is a pair of
//             adjacent m-blocks that see the same keys, one per block of
//             the cluster, whose producers each load half of every K and
//             V tile into both blocks (TMA multicast); else each block
//             runs alone, as kStatic.
// The dynamic counter starts at zero for every launch (the launch sequence
// clears it); its producer claims the next tile while the consumers work on
// the current one and hands it to them through shared memory.
#pragma once

#include "templates/primitives/config.h"

namespace attune {
namespace sm90_sched {

enum Kind : i32 { kGrid = 0, kStatic = 1, kDynamic = 2, kVarlen = 3, kCluster = 4 };

// kCluster's blocks per cluster.
inline constexpr i32 kClusterBlocks = 2;

struct WorkTile {
  i32 m_block;
  i32 head;
  i32 batch;
};

struct TileOrder {
  i32 m_blocks;  // query blocks of the longest sequence
  i32 heads;     // query heads
  i32 batches;
  i32 section_heads;  // (batch, head) pairs per L2 section, >= 1

  ATTUNE_HOST_DEVICE i32 count() const { return m_blocks * heads * batches; }
  // Tile `index` of [0, count()).
  ATTUNE_HOST_DEVICE WorkTile at(i32 index) const {
    const i32 pairs = heads * batches;
    const i32 per_section = section_heads * m_blocks;
    const i32 section = index / per_section;
    const i32 in_section = index - section * per_section;
    const i32 first_pair = section * section_heads;
    const i32 rest = pairs - first_pair;
    const i32 width = rest < section_heads ? rest : section_heads;  // the last section may be narrower
    const i32 step = in_section / width;
    const i32 pair = first_pair + (in_section - step * width);
    return {m_blocks - 1 - step, pair % heads, pair / heads};
  }
};

// kVarlen's numbers: slot s is sequence slot_batch[s] (longest first) and
// owns the tiles [tile_start[s], tile_start[s + 1]); tile i is tiles[i]:
// its sequence in the low word, m_block x heads + head in the high one.
struct VarlenTiles {
  i32* slot_batch;  // [batches]
  i32* tile_start;  // [batches + 1]
  u64* tiles;       // [capacity]
  i32 capacity;     // the tiles the workspace holds (a bound from the problem's sizes)
};

// Where a call's workspace holds the scheduler's state: the dynamic
// counter (16 bytes), then for kVarlen slot_batch, tile_start and tiles.
struct VarlenLayout {
  i64 batches;
  i64 capacity;
  ATTUNE_HOST_DEVICE static constexpr i64 counter_bytes() { return 16; }
  ATTUNE_HOST_DEVICE i64 slot_batch_offset() const { return counter_bytes(); }
  ATTUNE_HOST_DEVICE i64 tile_start_offset() const { return slot_batch_offset() + 4 * batches; }
  ATTUNE_HOST_DEVICE i64 tiles_offset() const { return (tile_start_offset() + 4 * (batches + 1) + 7) / 8 * 8; }
  ATTUNE_HOST_DEVICE i64 bytes() const { return (tiles_offset() + 8 * capacity + 15) / 16 * 16; }
};

// The number a CTA (a cluster of paired blocks) runs after `current` under
// the static, cluster and grid schedulers (the dynamic one claims it);
// >= count when none is left. `ctas`: the CTAs or clusters that share out
// the tiles.
ATTUNE_HOST_DEVICE inline i32 next_static(i32 kind, i32 current, i32 ctas, i32 count) {
  return kind == kStatic || kind == kCluster ? current + ctas : count;
}

}  // namespace sm90_sched
}  // namespace attune
