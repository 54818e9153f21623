// The varlen tile scheduler of the Hopper forward (sm90_sched::kVarlen):
// sm90_varlen_tiles numbers the tiles that exist, once per call, before
// flash_fwd_sm90 runs, and the forward's producer finds a tile from its
// number.
//
// With packed sequences the other schedulers number m-blocks of the
// longest sequence for every sequence: a short one leaves empty tiles, and
// heaviest-first holds only within a sequence. Here each sequence (a slot,
// longest first) owns its own m-blocks x heads, so every number is work
// and the dynamic counter hands out the heaviest first across the batch.
// The numbers live in the call's workspace (sm90_sched::VarlenLayout):
// computed on the device from the call's lengths, so a plan runs with no
// host work, no allocation and no sync, and replays in a CUDA graph.
#pragma once

#include "templates/flash_tile.cuh"
#include "templates/sequence.cuh"
#include "templates/sm90_scheduler.cuh"

namespace attune {

struct Sm90VarlenTilesParams {
  SequenceArrays seqs;
  MaskParams mask;
  i32 batches;
  i32 heads;    // query heads: a sequence's tiles are its m-blocks x heads
  i32 block_m;  // the forward variant's query rows per tile
  sm90_sched::VarlenTiles out;
};

// At most kSortedBatches sequences are sorted by work (in shared memory);
// more keep the batch order.
inline constexpr i32 kSortedBatches = 4096;

struct Sm90VarlenTilesTunables {
  static constexpr int kThreads[] = {256};
  static constexpr const char* kIdKeys[] = {"t"};
  ATTUNE_HOST_DEVICE static constexpr int threads(int threads) { return threads; }
  // The sort keys, then one partial sum per thread.
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int threads) { return kSortedBatches * 8 + threads * 4; }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int threads) {
    return threads % kWarpSize == 0 && threads >= kWarpSize && threads <= 1024;
  }
};

namespace sm90_sched {

// The keys the heaviest m-block of a sequence sees (its last: masks by
// global position only widen with the row), the work it is sorted by.
ATTUNE_DEVICE i64 sequence_work(const MaskParams& mask, const Sequence& s, i32 block_m) {
  if (s.q_len <= 0) return 0;
  const i64 row0 = ((s.q_len - 1) / block_m) * block_m;
  const RowBlockKeys keys = row_block_keys(mask, row0, last_row_of(row0, block_m, s.q_len), s.q_len, s.k_len);
  return keys.last.end > keys.first.begin ? keys.last.end - keys.first.begin : 0;
}

// The slot holding tile `index` (< the tile count), searched upward from
// `slot`, a slot at or before it (a CTA's numbers only grow): 32 starts a
// step, counted by the whole warp. Every lane calls it.
ATTUNE_DEVICE i32 varlen_slot(const VarlenTiles& v, i32 batches, i32 slot, i32 index) {
  const i32 lane = dev::lane_id();
  for (;;) {
    const i32 s = slot + 1 + lane;
    i32 below = s <= batches && dev::load_global(v.tile_start + s) <= index ? 1 : 0;  // starts never decrease
    ATTUNE_UNROLL
    for (i32 m = kWarpSize / 2; m >= 1; m /= 2) below += dev::warp::shfl_xor(below, m);
    slot += below;
    if (below < kWarpSize) return slot;
  }
}

// Tile `index` of slot `slot`: its sequence's m-blocks over the heads as
// TileOrder numbers one batch (heaviest m-block first, L2 sections of
// `order.section_heads` heads).
ATTUNE_DEVICE WorkTile varlen_tile(const VarlenTiles& v, const TileOrder& order, i32 slot, i32 index) {
  const i32 start = dev::load_global(v.tile_start + slot);
  const i32 m_blocks = (dev::load_global(v.tile_start + slot + 1) - start) / order.heads;
  WorkTile t = TileOrder{m_blocks, order.heads, 1, order.section_heads}.at(index - start);
  t.batch = dev::load_global(v.slot_batch + slot);
  return t;
}

}  // namespace sm90_sched

// Grid: 1 CTA; block: kThreads; dynamic shared memory: shared_bytes().
// Writes out.slot_batch (sequences by descending work, ties by index; the
// batch order past kSortedBatches) and out.tile_start (each slot's first
// tile; tile_start[batches] = every tile).
template <int kThreads, class DType>
ATTUNE_KERNEL void sm90_varlen_tiles(Sm90VarlenTilesParams p) {
  u64* keys = dev::shared_memory<u64>();
  i32* sums = dev::shared_as<i32>(keys + kSortedBatches);
  const i32 t = dev::linear_thread();
  const i32 batches = p.batches;
  const bool sorted = batches <= kSortedBatches;
  const auto sequence = [&](i32 b) { return sequence_of<LengthCut::kQuiet>(p.seqs, b); };
  if (sorted) {
    i32 n = 1;
    while (n < batches) n *= 2;
    // Ascending keys: (2^31 - 1 - work) above, the sequence below.
    for (i32 i = t; i < n; i += kThreads) {
      u64 key = ~u64{0};
      if (i < batches) {
        const i64 work = sm90_sched::sequence_work(p.mask, sequence(i), p.block_m);
        const i64 rank = 0x7fffffff - (work < 0x7fffffff ? work : 0x7fffffff);
        key = (static_cast<u64>(rank) << 32) | static_cast<u32>(i);
      }
      dev::store_shared(keys + i, key);
    }
    dev::block::sync();
    // Bitonic sort: every pair (i, i ^ j) by one thread per step.
    for (i32 k = 2; k <= n; k *= 2) {
      for (i32 j = k / 2; j > 0; j /= 2) {
        for (i32 i = t; i < n; i += kThreads) {
          const i32 l = i ^ j;
          if (l > i) {
            const u64 a = dev::load_shared(keys + i);
            const u64 b = dev::load_shared(keys + l);
            if ((a > b) == ((i & k) == 0)) {
              dev::store_shared(keys + i, b);
              dev::store_shared(keys + l, a);
            }
          }
        }
        dev::block::sync();
      }
    }
  }
  const auto batch_of = [&](i32 s) { return sorted ? static_cast<i32>(dev::load_shared(keys + s) & 0xffffffffU) : s; };
  const auto tiles_of = [&](i32 b) {
    const i64 q_len = sequence(b).q_len;
    return static_cast<i32>((q_len + p.block_m - 1) / p.block_m) * p.heads;
  };
  // Each thread a run of slots: their sum, the sums' inclusive scan, then
  // the run's starts from the sum before it.
  const i32 run = (batches + kThreads - 1) / kThreads;
  const i32 first = t * run;
  const i32 last = first + run < batches ? first + run : batches;
  i32 sum = 0;
  for (i32 s = first; s < last; ++s) sum += tiles_of(batch_of(s));
  dev::store_shared(sums + t, sum);
  dev::block::sync();
  for (i32 d = 1; d < kThreads; d *= 2) {
    const i32 add = t >= d ? dev::load_shared(sums + t - d) : 0;
    dev::block::sync();
    if (t >= d) dev::store_shared(sums + t, dev::load_shared(sums + t) + add);
    dev::block::sync();
  }
  i32 start = t > 0 ? dev::load_shared(sums + t - 1) : 0;
  for (i32 s = first; s < last; ++s) {
    const i32 b = batch_of(s);
    dev::store_global(p.out.slot_batch + s, b);
    dev::store_global(p.out.tile_start + s, start);
    start += tiles_of(b);
  }
  if (t == kThreads - 1) dev::store_global(p.out.tile_start + batches, dev::load_shared(sums + t));
}

}  // namespace attune
