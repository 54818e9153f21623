// The varlen tile scheduler of the Hopper forward (sm90_sched::kVarlen):
// sm90_varlen_tiles numbers the tiles that exist, once per call, before
// flash_fwd_sm90 runs; the forward's producer reads a tile's numbers with
// one load (a search for its sequence spilled the producer's registers).
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
  i32 heads;          // query heads: a sequence's tiles are its m-blocks x heads
  i32 section_heads;  // heads of one L2 section (TileOrder)
  i32 block_m;        // the forward variant's query rows per tile
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

// Tile `index` (< tile_start[batches]) as sm90_varlen_tiles wrote it.
ATTUNE_DEVICE WorkTile varlen_tile(const VarlenTiles& v, i32 heads, i32 index) {
  const u64 x = dev::load_global(v.tiles + index);
  const i32 m_head = static_cast<i32>(x >> 32);
  const i32 m_block = m_head / heads;
  return {m_block, m_head - m_block * heads, static_cast<i32>(x & 0xffffffffU)};
}

}  // namespace sm90_sched

// Grid: 1 CTA; block: kThreads; dynamic shared memory: shared_bytes().
// Writes out.slot_batch (sequences by descending work, ties by index; the
// batch order past kSortedBatches), out.tile_start (each slot's first
// tile; tile_start[batches] = every tile, at most out.capacity) and
// out.tiles (a slot's numbered as TileOrder numbers one batch: heaviest
// m-block first, over L2 sections of heads).
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
    const i64 q_len = sequence(b).q_len;  // (offsets that decrease count none)
    return q_len > 0 ? static_cast<i32>((q_len + p.block_m - 1) / p.block_m) * p.heads : 0;
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
    // (Lengths past the plan's bounds stay within the workspace.)
    dev::store_global(p.out.tile_start + s, start < p.out.capacity ? start : p.out.capacity);
    start += tiles_of(b);
  }
  if (t == kThreads - 1) {
    const i32 total = dev::load_shared(sums + t);
    dev::store_global(p.out.tile_start + batches, total < p.out.capacity ? total : p.out.capacity);
  }
  dev::block::sync();  // the starts, before every warp reads them
  // A warp per slot, its lanes over the slot's tiles.
  constexpr i32 kWarps = kThreads / kWarpSize;
  for (i32 s = dev::warp_id(); s < batches; s += kWarps) {
    const i32 begin = dev::load_global(p.out.tile_start + s);
    const i32 end = dev::load_global(p.out.tile_start + s + 1);
    const i32 b = dev::load_global(p.out.slot_batch + s);
    // (From the sequence, not end - begin: the capacity may have cut the range.)
    const i32 count = tiles_of(b);
    const sm90_sched::TileOrder order{count / p.heads, p.heads, 1, p.section_heads};
    for (i32 j = dev::lane_id(); j < count && begin + j < end; j += kWarpSize) {
      const sm90_sched::WorkTile w = order.at(j);
      const u64 m_head = static_cast<u32>(w.m_block * p.heads + w.head);
      dev::store_global(p.out.tiles + begin + j, (m_head << 32) | static_cast<u32>(b));
    }
  }
}

}  // namespace attune
