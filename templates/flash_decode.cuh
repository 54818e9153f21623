// Split-KV decode: few query rows per sequence against a long KV cache.
//
// The keys of a sequence are cut into `splits` contiguous ranges of whole
// tiles, one CTA each, so a decode step with little batch x heads still fills
// the GPU. Each CTA runs the forward kernel's tile loop (flash_tile.cuh) over
// its range and, when there is more than one split, writes its rows'
// unnormalized state (u, m, l) to a float workspace; flash_decode_combine
// merges the splits with the same rule as the tiles (rescale both l and u
// to the common maximum). With one split the CTA writes O and LSE directly.
//
// The cache is contiguous [B, Smax, Hkv, D] with per-sequence lengths, or
// paged: a block table [B, max_pages] of page indices into a pool
// [pages, page_size, Hkv, D]. Queries are dense [B, Sq, Hq, Dk], or packed
// [Tq, Hq, Dk] with cu_seqlens_q (mixed prefill and decode over a paged
// cache), each sequence's rows seeing its keys bottom-right. With kPackGqa the query heads sharing a KV head
// are packed into the rows of one block (row = position * group + head in
// group), so K and V are read once per KV head.
#pragma once

#include "templates/flash_tile.cuh"

namespace attune {

struct FlashDecodeParams {
  const u16* q;    // [B, Sq, Hq, Dk], or packed [Tq, Hq, Dk] (batch stride 0)
  const u16* k;    // [B, Smax, Hkv, Dk], or the page pool [pages, page_size, Hkv, Dk]
  const u16* v;    // [B, Smax, Hkv, Dv], or the page pool [pages, page_size, Hkv, Dv]
  u16* o;          // [B, Sq, Hq, Dv]
  float* lse;      // [B, Hq, Sq]; null: not written
  float* partial;  // [splits, B, Hq, max_seqlen_q, Dv + 2]: (u, m, l) of each split; used when splits > 1
  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;  // batch stride: the page stride when paged
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_row_stride, lse_head_stride;
  const i32* cu_seqlens_q;   // [B+1] packed query rows; null: dense
  const i32* cache_seqlens;  // [B] keys in each sequence's cache; null: all seqlen_k
  const i32* block_table;    // [B, block_table_stride] page of each page_size keys; null: contiguous
  i32 block_table_stride;
  i32 page_size;
  i32 num_pages;  // the pool's pages (paged): an entry outside is read as page 0, and reported
  i32 batch;
  i32 seqlen_q;
  i32 max_seqlen_q;  // query rows per sequence the grid covers: Sq, or the packed rows' bound
  i32 seqlen_k;      // Smax, or max_pages * page_size when paged
  i32 heads_q;
  i32 group_size;  // Hq / Hkv
  i32 head_dim_k;
  i32 head_dim_v;
  MaskParams mask;
  float scale_log2;
  i32 vectorized;       // 1: every row starts 16-byte aligned, so tiles load with cp.async
  i32 splits;           // CTAs along the keys
  i32 split_tiles;      // key tiles per split; 0: a sequence's tiles cut into `splits` equal parts
  ScoreModParams mods;  // read only by variants that compile modifiers in; sinks join in the combine when split
  Fp8Inputs fp8;        // read only by variants with kFp8: an fp8 cache (k, v point at its bytes), or fp8 queries too
};

// The tunable space of flash_decode (read by attune-gen). Decode blocks hold
// few rows: one 16-row mma tile per warp along the rows (kBlockM / 16 warps),
// and kWarpsN warps share the keys of each tile.
struct FlashDecodeTunables {
  static constexpr int kHeadDim[] = {32, 64, 96, 128, 160, 192, 224, 256};  // Dk and Dv padded up to it
  static constexpr int kBlockM[] = {16, 64};                                // (packed) query rows per block
  static constexpr int kBlockN[] = {32, 64, 128};                           // keys per tile
  static constexpr int kWarpsN[] = {1, 2, 4};                               // warps along the keys of a tile
  static constexpr int kStages[] = {1, 2};                                  // cp.async pipeline depth
  static constexpr int kPackGqa[] = {0, 1};  // 1: the query heads of one KV head share a block
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "wn", "st", "pk"};

  // The forward kernel's register model (FlashFwdTunables) with one m-tile
  // per warp.
  static constexpr int kRegisterBudget = 152;
  static constexpr int kMaxWarpKeyTiles = 8;

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int block_m, int /*block_n*/, int warps_n,
                                                  int /*stages*/, int /*pack*/) {
    return (block_m / 16) * warps_n * kWarpSize;
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int warps_n, int stages,
                                                       int /*pack*/) {
    // As flash_fwd: Q, then the K and V stages; the warps' merge reuses them.
    const int pipeline = 2 * (block_m * head_dim + 2 * stages * block_n * head_dim);
    const int merge = 4 * (warps_n - 1) * block_m * (head_dim + 2);
    return pipeline > merge ? pipeline : merge;
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int warps_n, int stages,
                                                 int pack) {
    const int warps_m = block_m / 16;
    const int warp_keys = block_n / warps_n;
    const int key_tiles = warp_keys / 8;
    const int registers = (head_dim / 8) * 4 + key_tiles * 6;
    return block_m % 16 == 0 && block_n % warps_n == 0 && warp_keys % 16 == 0 && head_dim % 16 == 0 && stages >= 1 &&
           stages <= 4 && warps_m * warps_n <= 4 && key_tiles <= kMaxWarpKeyTiles && registers <= kRegisterBudget &&
           (pack == 0 || pack == 1);
  }
};

namespace decode_detail {

// Where row `row` of the packed row space of block slot `slot` lives: its
// query position and head.
struct RowPlace {
  i64 position;
  i32 head;
};

template <int kPackGqa>
ATTUNE_DEVICE RowPlace place(i64 row, i32 slot, i32 group) {
  if (kPackGqa != 0) return {row / group, static_cast<i32>(slot * group + row % group)};
  return {row, slot};
}

}  // namespace decode_detail

// Grid: (splits, row blocks x slots, B), where a slot is a query head
// (kPackGqa = 0) or a KV head (kPackGqa = 1) and row blocks =
// ceil(Sq x rows per position / kBlockM); block: threads(); dynamic shared
// memory: shared_bytes() (FlashDecodeTunables).
// kFp8: an fp8 KV cache (Fp8Inputs), widened to DType as it loads, the
// splits and their combine unchanged.
template <int kHeadDim, int kBlockM, int kBlockN, int kWarpsN, int kStages, int kPackGqa, class DType, int kSoftcap,
          int kSinks, int kAlibi, int kFp8 = 0>
ATTUNE_KERNEL void flash_decode(FlashDecodeParams p) {
  static_assert(FlashDecodeTunables::valid(kHeadDim, kBlockM, kBlockN, kWarpsN, kStages, kPackGqa),
                "flash_decode: these tunables break FlashDecodeTunables::valid");
  using Mods = ScoreMods<kSoftcap, kSinks, kAlibi>;
  using Config = TileConfig<kHeadDim, kBlockM, kBlockN, kBlockM / 16, kWarpsN, kStages, DType, false, Mods, kFp8>;
  const i32 pack = kPackGqa != 0 ? p.group_size : 1;
  const i32 row_blocks = static_cast<i32>((static_cast<i64>(p.max_seqlen_q) * pack + kBlockM - 1) / kBlockM);
  const i32 split = dev::block_index().x;
  const i32 slot = dev::block_index().y / row_blocks;
  const i32 m_block = dev::block_index().y % row_blocks;
  const i32 batch = dev::block_index().z;
  const i32 kv_head = kPackGqa != 0 ? slot : slot / p.group_size;
  // Packed queries: the sequence's first row in Q, O and LSE. The cache has
  // no packed keys: its lengths are cut to what a sequence owns.
  const Sequence seq = sequence_of({p.cu_seqlens_q, nullptr, p.cache_seqlens, p.max_seqlen_q, p.seqlen_k}, batch);
  const i64 q_begin = seq.q_begin;
  const i64 q_len = seq.q_len;
  const i64 rows = q_len * pack;
  const i64 row0 = static_cast<i64>(m_block) * kBlockM;
  if (row0 >= rows) return;  // a shorter sequence than the grid's: the whole block leaves together
  const i64 k_len = seq.k_len;

  // This split's share of the cache, in whole tiles, cut to what the rows
  // see. A fixed split size puts the cuts where the sequence alone decides.
  const i64 cache_tiles = (k_len + kBlockN - 1) / kBlockN;
  const i64 tiles_per_split = p.split_tiles > 0 ? p.split_tiles : (cache_tiles + p.splits - 1) / p.splits;
  const RowBlockKeys keys = row_block_keys(p.mask, row0 / pack, last_row_of(row0, kBlockM, rows) / pack, q_len, k_len);
  const i64 visible_begin = keys.tile_begin<kBlockN>();
  const i64 visible_end = keys.tile_end<kBlockN>();
  const i64 split_begin = split * tiles_per_split;
  const i64 split_end = split_begin + tiles_per_split;
  const i64 n_begin = visible_begin > split_begin ? visible_begin : split_begin;
  const i64 n_end = visible_end < split_end ? visible_end : split_end;

  u16* smem = dev::shared_memory<u16>();
  u16* q_s = smem;
  u16* k_s = smem + Config::kQElems;
  u16* v_s = k_s + Config::kStages * Config::kTileElems;
  const bool vectorized = p.vectorized != 0;
  // Block row r's head is the slot's first head + r % pack.
  const i32 head0 = kPackGqa != 0 ? slot * p.group_size : slot;
  // fp8: the stored formats, and q and k's descales folded into the scale.
  const i32 q_format = Config::kMayFp8 ? p.fp8.q_format : kStored16;
  const i32 kv_format = Config::kMayFp8 ? p.fp8.kv_format : kStored16;
  const float scale_log2 = Config::kMayFp8 ? p.scale_log2 * p.fp8.score_factor(batch, kv_head) : p.scale_log2;
  const flash_detail::TileMask tile_mask{
      p.mask, scale_log2, pack, block_score_mods<Mods>(p.mods, scale_log2, batch, head0), {}};

  const auto q_row = [&](i32 r) {
    const decode_detail::RowPlace at = decode_detail::place<kPackGqa>(row0 + r, slot, p.group_size);
    return p.q + batch * p.q_batch_stride + (q_begin + at.position) * p.q_row_stride + at.head * p.q_head_stride;
  };
  const auto q_row_bytes = [&](i32 r) {  // fp8 queries
    const decode_detail::RowPlace at = decode_detail::place<kPackGqa>(row0 + r, slot, p.group_size);
    return flash_detail::stored_bytes(p.q) + batch * p.q_batch_stride + (q_begin + at.position) * p.q_row_stride +
           at.head * p.q_head_stride;
  };
  const KeyPages pages{p.block_table, p.block_table_stride, p.page_size, p.num_pages};
  const auto issue = [&](i64 n) {
    if (n < n_end) {
      const i32 stage = static_cast<i32>(n % Config::kStages);
      const i64 key0 = n * Config::kBlockN;
      if (Config::kMayFp8 && kv_format != kStored16) {  // the stored bytes, widened as they load
        flash_detail::load_cache_kv<Config>(
            k_s + stage * Config::kTileElems, v_s + stage * Config::kTileElems, pages,
            flash_detail::CacheRows<u8>{flash_detail::stored_bytes(p.k), p.k_batch_stride, p.k_row_stride,
                                        kv_head * p.k_head_stride},
            flash_detail::CacheRows<u8>{flash_detail::stored_bytes(p.v), p.v_batch_stride, p.v_row_stride,
                                        kv_head * p.v_head_stride},
            batch, key0, k_len - key0, p.head_dim_k, p.head_dim_v, vectorized, kv_format);
      } else {
        flash_detail::load_cache_kv<Config>(
            k_s + stage * Config::kTileElems, v_s + stage * Config::kTileElems, pages,
            flash_detail::CacheRows<u16>{p.k, p.k_batch_stride, p.k_row_stride, kv_head * p.k_head_stride},
            flash_detail::CacheRows<u16>{p.v, p.v_batch_stride, p.v_row_stride, kv_head * p.v_head_stride}, batch, key0,
            k_len - key0, p.head_dim_k, p.head_dim_v, vectorized);
      }
    }
    dev::cp_async::commit();  // possibly empty: keeps the group count uniform
  };

  typename Config::Softmax softmax;
  softmax.init();
  if (n_begin < n_end) {
    if (Config::kMayFp8 && q_format != kStored16) {
      flash_detail::load_fp8_rows<Config, Config::kBlockM>(q_s, q_row_bytes, rows - row0, p.head_dim_k, vectorized,
                                                           q_format);
    } else {
      flash_detail::load_rows<Config, Config::kBlockM>(q_s, q_row, rows - row0, p.head_dim_k, vectorized);
    }
    dev::cp_async::commit();
    flash_detail::attend_key_tiles<Config>(q_s, k_s, v_s, softmax, tile_mask, row0, n_begin, n_end, keys, q_len, k_len,
                                           issue);
  }

  if (!flash_detail::merge_warps<Config>(softmax)) return;
  // With one split, O and LSE; with more, this split's unnormalized state
  // (an empty split leaves m = -inf, l = 0) for flash_decode_combine.
  const bool partial = p.splits > 1;
  const float v_descale = Config::kMayFp8 ? p.fp8.output_factor(batch, kv_head) : 1.0f;
  flash_detail::store_rows<Config>(softmax, p.head_dim_v, partial, [&](i32 r) {
    const i64 row = row0 + r;
    if (row >= rows) return flash_detail::RowOut{nullptr, nullptr, nullptr};
    const decode_detail::RowPlace at = decode_detail::place<kPackGqa>(row, slot, p.group_size);
    const i64 position = q_begin + at.position;
    u16* o = p.o + batch * p.o_batch_stride + position * p.o_row_stride + at.head * p.o_head_stride;
    float* lse = p.lse == nullptr
                     ? nullptr
                     : p.lse + batch * p.lse_batch_stride + at.head * p.lse_head_stride + position * p.lse_row_stride;
    const i64 index =
        ((static_cast<i64>(split) * p.batch + batch) * p.heads_q + at.head) * p.max_seqlen_q + at.position;
    float* state = partial ? p.partial + index * (p.head_dim_v + 2) : nullptr;
    const float* sink = tile_mask.mods.sink != nullptr ? tile_mask.mods.sink + (at.head - head0) : nullptr;
    return flash_detail::RowOut{o, lse, state, sink, 1.0f, v_descale};
  });
}

// The merge of the splits' states: one warp per output row (b, h, i), lanes
// over the columns of Dv.
struct FlashDecodeCombineParams {
  const float* partial;     // [splits, rows, Dv + 2] as flash_decode writes it
  u16* o;                   // [B, Sq, Hq, Dv], or packed [Tq, Hq, Dv]
  float* lse;               // [B, Hq, Sq], or packed [Hq, Tq]; null: not written
  const i32* cu_seqlens_q;  // [B+1] packed query rows; null: dense
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_row_stride, lse_head_stride;
  i32 batch;
  i32 heads_q;
  i32 seqlen_q;  // rows per sequence in the workspace: flash_decode's max_seqlen_q
  i32 head_dim_v;
  i32 splits;
  const float* sinks;  // [Hq] (kSinks): the sink joins the merged state, once
};

struct FlashDecodeCombineTunables : WarpPerRowTunables {};

// Grid: (ceil(B x Hq x max_seqlen_q / kWarps)); block: kWarps x 32 threads.
// Rows past a packed sequence's length have no state and are skipped. A lane
// holds columns lane, lane + 32, ... of its warp's row; the splits' states
// merge one by one by the softmax's rule, empty splits (l = 0) skipped
// explicitly.
template <int kWarps, class DType, int kSinks>
ATTUNE_KERNEL void flash_decode_combine(FlashDecodeCombineParams p) {
  using D = DType;
  constexpr int kMaxDv = 256;
  constexpr int kColsPerLane = kMaxDv / kWarpSize;
  const i64 rows = static_cast<i64>(p.batch) * p.heads_q * p.seqlen_q;
  const i64 row = static_cast<i64>(dev::block_index().x) * kWarps + dev::warp_id();
  if (row >= rows) return;  // whole warps leave together
  i64 position = row % p.seqlen_q;
  const i64 head = (row / p.seqlen_q) % p.heads_q;
  const i64 b = row / (static_cast<i64>(p.seqlen_q) * p.heads_q);
  if (p.cu_seqlens_q != nullptr) {
    const i64 q_begin = dev::load_global(p.cu_seqlens_q + b);
    if (position >= dev::load_global(p.cu_seqlens_q + b + 1) - q_begin) return;
    position += q_begin;
  }
  const i32 lane = dev::lane_id();
  const i64 stride = p.head_dim_v + 2;
  const i64 split_stride = rows * stride;

  softmax::LaneRow<kColsPerLane> merged;
  merged.init();
  for (i32 s = 0; s < p.splits; ++s) {
    const float* state = p.partial + s * split_stride + row * stride;
    const float ls = dev::load_global(state + p.head_dim_v + 1);
    if (!(ls > 0.0f)) continue;
    merged.join(dev::load_global(state + p.head_dim_v), ls, lane, p.head_dim_v,
                [&](i32 col) { return dev::load_global(state + col); });
  }
  u16* o_row = p.o + b * p.o_batch_stride + position * p.o_row_stride + head * p.o_head_stride;
  softmax::RowEnd end = softmax::finalize(merged.m, merged.l);
  if (kSinks != 0 && (kSinks != kAtRunTime || p.sinks != nullptr)) {
    end = softmax::finalize_with_sink(merged.m, merged.l, dev::load_global(p.sinks + head) * kLog2e);
  }
  merged.store(lane, p.head_dim_v, end.inv_l,
               [&](i32 col, float value) { dev::store_global(o_row + col, dev::to_bits<D>(value)); });
  if (p.lse != nullptr && lane == 0) {
    dev::store_global(p.lse + b * p.lse_batch_stride + head * p.lse_head_stride + position * p.lse_row_stride, end.lse);
  }
}

}  // namespace attune
