// The tile machinery shared by the attention kernels (forward, split-KV
// decode): sizes of a block's tiles, tile loads, the step of one K/V tile on
// mma.sync (scores, scale and mask, softmax update, P V), the K/V pipeline,
// the merge of the warps' row states, and the store of finished rows.
#pragma once

#include "templates/mask.h"
#include "templates/online_softmax.cuh"
#include "templates/score_mods.cuh"
#include "templates/sequence.cuh"
#include "templates/smem_layout.cuh"

namespace attune {

// The tunables every tiled kernel shares, as constants of its config (the
// config derives every size from them), and what the tile loads need.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_, class DType_>
struct TileTunables {
  using DType = DType_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarpsM * kWarpsN * kWarpSize;
  static constexpr bool kMayFp8 = false;  // 16-bit inputs only (TileConfig may say otherwise)
};

// Every size of a forward or decode variant, derived from its tunables in
// one place. kQInRegisters: each warp keeps its Q fragments in registers
// across the key tiles instead of reloading them from shared memory. Mods:
// the score modifiers compiled in (ScoreMods). kFp8: fp8 inputs (Fp8Inputs)
// compiled in: 0 off, 1 on, kAtRunTime as the params say.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_, class DType_,
          bool kQInRegisters_ = false, class Mods_ = NoScoreMods, int kFp8_ = 0>
struct TileConfig : TileTunables<kHeadDim_, kBlockM_, kBlockN_, kWarpsM_, kWarpsN_, kStages_, DType_> {
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr bool kMayFp8 = kFp8_ != 0;
  using Mods = Mods_;
  using Base = TileTunables<kHeadDim_, kBlockM_, kBlockN_, kWarpsM_, kWarpsN_, kStages_, DType_>;
  static constexpr int kWarpRows = kBlockM_ / kWarpsM_;  // query rows per warp
  static constexpr int kWarpKeys = kBlockN_ / kWarpsN_;  // keys per warp per tile
  static constexpr int kMTiles = kWarpRows / 16;         // mma rows
  static constexpr int kNTiles = kWarpKeys / 8;          // S columns (keys)
  static constexpr int kKSteps = kHeadDim_ / 16;         // QK^T reduction steps
  static constexpr int kPSteps = kWarpKeys / 16;         // PV reduction steps
  static constexpr int kDTiles = kHeadDim_ / 8;          // O columns
  template <int kRows>
  using HeadDimTile = SmemTile<kRows, kHeadDim_>;  // rows of head-dim width, as load_rows writes them
  using QTile = HeadDimTile<kBlockM_>;             // Q in shared memory
  using KvTile = HeadDimTile<kBlockN_>;            // one stage of K or of V
  static constexpr int kQElems = QTile::kElems;
  static constexpr int kTileElems = KvTile::kElems;
  // The per-thread softmax state of a warp's rows, and S of one tile.
  using Softmax = OnlineSoftmax<kMTiles, kDTiles>;
  using Scores = frag::Accumulator<kMTiles, kNTiles>;
};

// The tunable space of the small kernels that give one warp to each output
// row (the decode combine, the backward's preprocess and dQ convert): rows
// per block. Each kernel's Tunables struct derives from it.
struct WarpPerRowTunables {
  static constexpr int kWarps[] = {4};  // rows per block
  static constexpr const char* kIdKeys[] = {"w"};
  ATTUNE_HOST_DEVICE static constexpr int threads(int warps) { return warps * kWarpSize; }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int /*warps*/) { return 0; }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int warps) { return warps >= 1 && warps <= 32; }
};

// A paged KV cache: key j of sequence b is row j % page_size of page
// block_table[b * block_table_stride + j / page_size] in page pools
// [pages, page_size, Hkv, D], whose batch stride is the page stride.
struct KeyPages {
  const i32* block_table;  // null: a contiguous [B, Sk, Hkv, D] cache
  i32 block_table_stride;  // the table's columns (max pages)
  i32 page_size;
  i32 num_pages;  // the pool's pages: an entry outside [0, num_pages) is read as page 0, and reported

  // Element offset of key `key` of sequence `batch` at head offset `head`.
  // A table in device memory may hold anything: a page outside the pool is
  // never read (bounds_report.h); keys stay within the row by the length
  // clamp (clamp_key_length).
  ATTUNE_DEVICE i64 key_offset(i64 batch_stride, i64 row_stride, i64 head, i32 batch, i64 key) const {
    if (block_table == nullptr) return batch * batch_stride + key * row_stride + head;
    const i64 column = key / page_size;
    i32 page = dev::load_global(block_table + static_cast<i64>(batch) * block_table_stride + column);
    if (page < 0 || page >= num_pages) {
      dev::report_bounds(kBoundsPage, batch, static_cast<i32>(column), page, num_pages);
      page = 0;
    }
    return page * batch_stride + (key % page_size) * row_stride + head;
  }
};

// Stored formats of an input (Fp8Inputs): 16-bit (the kernel's dtype), or
// one of the fp8 formats (templates/fp8.h).
inline constexpr i32 kStored16 = 0;
inline constexpr i32 kStoredE4M3 = 1;
inline constexpr i32 kStoredE5M2 = 2;

// fp8 inputs (docs/contract.md, "FP8 inputs"): the stored formats of Q and
// of K and V, and the factors that dequantize them (input = stored x
// descale), float32 at [b, kv_head] with these element strides; a null
// factor is 1. The loads widen each byte to the kernel's 16-bit dtype
// (exact: every e4m3 and e5m2 value is an fp16 and a bf16 value); the
// descales stay out of the key loop, as FlashAttention-3 keeps them: q and
// k's fold into the softmax scale, v's into the output's row scale.
struct Fp8Inputs {
  i32 q_format;   // kStored16, kStoredE4M3 or kStoredE5M2
  i32 kv_format;  // the same, for K and V
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  i64 descale_batch_stride;
  i64 descale_head_stride;

  ATTUNE_DEVICE float factor(const float* descale, i32 batch, i32 kv_head) const {
    if (descale == nullptr) return 1.0f;
    return dev::load_global(descale + batch * descale_batch_stride + kv_head * descale_head_stride);
  }
  // The softmax scale's factor, and the output's, of one (batch, kv head).
  ATTUNE_DEVICE float score_factor(i32 batch, i32 kv_head) const {
    return factor(q_descale, batch, kv_head) * factor(k_descale, batch, kv_head);
  }
  ATTUNE_DEVICE float output_factor(i32 batch, i32 kv_head) const { return factor(v_descale, batch, kv_head); }
};

namespace flash_detail {

// Eight fp8 bytes (lo: bytes 0..3, hi: 4..7) widened to the kernel's dtype
// D, in order, as 16 bytes of shared memory hold them.
template <class D, Fp8 F>
ATTUNE_DEVICE Vec16 widen_fp8x8(u32 lo, u32 hi) {
  const u16 pairs[4] = {static_cast<u16>(lo), static_cast<u16>(lo >> 16), static_cast<u16>(hi),
                        static_cast<u16>(hi >> 16)};
  Vec16 out;
  ATTUNE_UNROLL
  for (int i = 0; i < 4; ++i) {
    const u32 halves = dev::fp8x2_to_half2<F>(pairs[i]);
    out.w[i] = dev::pack2<D>(dev::unpack_lo<Fp16>(halves), dev::unpack_hi<Fp16>(halves));  // exact
  }
  return out;
}

// load_rows for an fp8 tensor: row r's stored bytes start at
// row_address(r). Each 16-byte chunk of the tile is 8 stored bytes, read
// into registers (one 8-byte load when rows are aligned) and widened there
// to Config::DType; the tile in shared memory is the one 16-bit storage
// gives. `format`: kStoredE4M3 or kStoredE5M2.
template <class Config, int kRows, class RowAddress>
ATTUNE_DEVICE void load_fp8_rows(u16* dst, const RowAddress& row_address, i64 rows_valid, i32 cols_valid,
                                 bool vectorized, i32 format) {
  using D = typename Config::DType;
  using Tile = typename Config::template HeadDimTile<kRows>;
  for (i32 c = dev::linear_thread(); c < Tile::kChunks; c += Config::kThreads) {
    const typename Tile::Coord at = Tile::chunk_coord(c);
    const bool row_ok = at.row < rows_valid;
    const i32 cols = row_ok ? (cols_valid - at.col < 8 ? cols_valid - at.col : 8) : 0;
    const u8* from = row_address(row_ok ? at.row : 0) + (row_ok ? at.col : 0);
    u64 bytes = 0;  // byte e in bits 8e..8e+7
    if (vectorized && cols == 8) {
      bytes = dev::load_global(reinterpret_cast<const u64*>(from));
    } else {
      for (i32 e = 0; e < cols; ++e) bytes |= static_cast<u64>(dev::load_global(from + e)) << (8 * e);
    }
    const u32 lo = static_cast<u32>(bytes);
    const u32 hi = static_cast<u32>(bytes >> 32);
    const Vec16 wide = format == kStoredE5M2 ? widen_fp8x8<D, Fp8::kE5M2>(lo, hi) : widen_fp8x8<D, Fp8::kE4M3>(lo, hi);
    dev::store_shared(reinterpret_cast<Vec16*>(dst + c * 8), wide);
  }
}

// The bytes of an fp8 tensor whose params field is a u16 pointer.
ATTUNE_DEVICE const u8* stored_bytes(const u16* p) { return reinterpret_cast<const u8*>(p); }

// Copies a tile of kRows x kHeadDim elements into shared memory, laid out as
// Config::HeadDimTile<kRows>; rows >= rows_valid and columns >= cols_valid
// are zero. Row r starts at row_address(r): tensors whose rows are not evenly
// spaced (paged caches, packed query heads) load through the same code.
template <class Config, int kRows, class RowAddress>
ATTUNE_DEVICE void load_rows(u16* dst, const RowAddress& row_address, i64 rows_valid, i32 cols_valid, bool vectorized) {
  using Tile = typename Config::template HeadDimTile<kRows>;
  const i32 tid = dev::linear_thread();
  // In storage order: thread t fills the t-th 16 bytes, whatever the layout.
  for (i32 c = tid; c < Tile::kChunks; c += Config::kThreads) {
    const typename Tile::Coord at = Tile::chunk_coord(c);
    const i32 row = at.row;
    const i32 col = at.col;
    const bool row_ok = row < rows_valid;
    const i32 cols = row_ok ? (cols_valid - col < 8 ? cols_valid - col : 8) : 0;
    const i32 valid = cols > 0 ? cols : 0;
    u16* to = dst + c * 8;
    const u16* from = row_address(row_ok ? row : 0) + (row_ok ? col : 0);
    if (vectorized) {
      dev::cp_async::copy16(to, from, valid * 2);
    } else {
      for (i32 e = 0; e < 8; ++e) {
        const u16 x = e < valid ? dev::load_global(from + e) : static_cast<u16>(0);
        dev::store_shared(to + e, x);
      }
    }
  }
}

// K or V of a KV cache as the key tiles read it: element `base` plus the
// offset of a key's row in its page (or the contiguous cache). T: u16, or
// u8 for an fp8 cache.
template <class T>
struct CacheRows {
  const T* base;
  i64 batch_stride;
  i64 row_stride;
  i64 head_offset;  // the KV head's: kv_head x head stride
  ATTUNE_DEVICE const T* row(const KeyPages& pages, i32 batch, i64 key) const {
    return base + pages.key_offset(batch_stride, row_stride, head_offset, batch, key);
  }
};

// K and V of keys [key0, key0 + kBlockN) into k_dst and v_dst, each key's
// row through the block table (KeyPages' rule); keys >= keys_valid are 0.
template <class Config>
ATTUNE_DEVICE void load_cache_kv(u16* k_dst, u16* v_dst, const KeyPages& pages, const CacheRows<u16>& k,
                                 const CacheRows<u16>& v, i32 batch, i64 key0, i64 keys_valid, i32 head_dim_k,
                                 i32 head_dim_v, bool vectorized) {
  load_rows<Config, Config::kBlockN>(
      k_dst, [&](i32 r) { return k.row(pages, batch, key0 + r); }, keys_valid, head_dim_k, vectorized);
  load_rows<Config, Config::kBlockN>(
      v_dst, [&](i32 r) { return v.row(pages, batch, key0 + r); }, keys_valid, head_dim_v, vectorized);
}
// The same from an fp8 cache (`format`: kStoredE4M3 or kStoredE5M2).
template <class Config>
ATTUNE_DEVICE void load_cache_kv(u16* k_dst, u16* v_dst, const KeyPages& pages, const CacheRows<u8>& k,
                                 const CacheRows<u8>& v, i32 batch, i64 key0, i64 keys_valid, i32 head_dim_k,
                                 i32 head_dim_v, bool vectorized, i32 format) {
  load_fp8_rows<Config, Config::kBlockN>(
      k_dst, [&](i32 r) { return k.row(pages, batch, key0 + r); }, keys_valid, head_dim_k, vectorized, format);
  load_fp8_rows<Config, Config::kBlockN>(
      v_dst, [&](i32 r) { return v.row(pages, batch, key0 + r); }, keys_valid, head_dim_v, vectorized, format);
}

// load_rows for rows `row_stride` elements apart from `src`.
template <class Config, int kRows>
ATTUNE_DEVICE void load_tile(u16* dst, const u16* src, i64 row_stride, i64 rows_valid, i32 cols_valid,
                             bool vectorized) {
  load_rows<Config, kRows>(
      dst, [&](i32 row) { return src + row * row_stride; }, rows_valid, cols_valid, vectorized);
}
// The same from an fp8 tensor's bytes.
template <class Config, int kRows>
ATTUNE_DEVICE void load_tile(u16* dst, const u8* src, i64 row_stride, i64 rows_valid, i32 cols_valid, bool vectorized,
                             i32 format) {
  load_fp8_rows<Config, kRows>(
      dst, [&](i32 row) { return src + row * row_stride; }, rows_valid, cols_valid, vectorized, format);
}

// What attend_tile needs of the problem: the mask band, the softmax scale in
// base 2, how block rows map to query positions (row / pack: `pack` query
// heads of one position sit in consecutive rows, 1 when unpacked), and the
// score modifiers and dropout (read only where Config::Mods compiles them in).
struct TileMask {
  MaskParams mask;
  float scale_log2;
  i32 pack;
  BlockScoreMods mods;
  BlockDropout drop;  // read only where Config::Mods compiles dropout in
};

// A warp's A fragments of Q: read from shared memory at each use, or (with
// kQInRegisters) loaded once before the key loop and kept in registers.
template <class Config, bool kInRegisters = Config::kQInRegisters>
struct QFragments {
  const u16* q_s;
  i32 warp_row0;
  ATTUNE_DEVICE void load() {}  // nothing to keep
  ATTUNE_DEVICE void get(u32 (&a)[Config::kMTiles][4], int ks) const {
    const i32 lane = dev::lane_id();
    const auto at = Config::QTile::lane(warp_row0 + frag::x4_row(lane), frag::x4_col(lane));
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) dev::warp::ldmatrix_x4(a[mt], q_s + at.at(mt * 16, ks * 16));
  }
};

template <class Config>
struct QFragments<Config, true> {
  const u16* q_s;
  i32 warp_row0;
  u32 held[Config::kKSteps][Config::kMTiles][4];
  // After the Q tile landed (and a barrier).
  ATTUNE_DEVICE void load() {
    ATTUNE_UNROLL
    for (int ks = 0; ks < Config::kKSteps; ++ks) {
      QFragments<Config, false>{q_s, warp_row0}.get(held[ks], ks);
    }
  }
  ATTUNE_DEVICE void get(u32 (&a)[Config::kMTiles][4], int ks) const {
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int e = 0; e < 4; ++e) a[mt][e] = held[ks][mt][e];
    }
  }
};

// S = Q K^T for this warp's rows and keys of the tile, over the head
// dimension 16 at a time; K's B fragments two 8-key tiles per ldmatrix.x4 (or x2 pairs).
template <class Config, class Q>
ATTUNE_DEVICE void tile_scores(const Q& q, const u16* k_s, typename Config::Scores& s, i32 warp_key0) {
  using D = typename Config::DType;
  using KvTile = typename Config::KvTile;
  const i32 lane = dev::lane_id();
  // With one m-tile per warp, ldmatrix.x4 halves the K loads; with two, each
  // B fragment already feeds two mma, and the x4's two extra live registers
  // tip the d96 variants into spills, so two x2 (the same bytes) are used.
  constexpr bool kX4 = Config::kMTiles == 1;
  const auto k_at = KvTile::lane(warp_key0 + (kX4 ? frag::x4_b_row(lane) : frag::x2_row(lane)), frag::x2_col(lane));
  s.fill(0.0f);
  ATTUNE_UNROLL
  for (int ks = 0; ks < Config::kKSteps; ++ks) {
    u32 a[Config::kMTiles][4];
    q.get(a, ks);
    ATTUNE_UNROLL
    for (int nt = 0; nt < Config::kNTiles; nt += 2) {
      u32 b0[2];
      u32 b1[2];
      if constexpr (kX4) {
        u32 b[4];
        dev::warp::ldmatrix_x4(b, k_s + k_at.at(nt * 8, ks * 16));
        b0[0] = b[0];
        b0[1] = b[1];
        b1[0] = b[2];
        b1[1] = b[3];
      } else {
        dev::warp::ldmatrix_x2(b0, k_s + k_at.at(nt * 8, ks * 16));
        dev::warp::ldmatrix_x2(b1, k_s + k_at.at(nt * 8 + 8, ks * 16));
      }
      ATTUNE_UNROLL
      for (int mt = 0; mt < Config::kMTiles; ++mt) {
        dev::warp::mma_m16n8k16<D>(s.tile(mt, nt), a[mt], b0, s.tile(mt, nt));
        dev::warp::mma_m16n8k16<D>(s.tile(mt, nt + 1), a[mt], b1, s.tile(mt, nt + 1));
      }
    }
  }
}

// Scores to base-2 logits, -inf for keys a row does not see, by global
// position: `row0` and `key0` are the warp's first row and key, and block
// row r is query position r / pack.
// The score modifiers apply first (softcap, then the ALiBi bias), as the
// contract orders them.
template <class Config, bool kMasked>
ATTUNE_DEVICE void scale_and_mask(typename Config::Scores& s, const TileMask& p, i64 row0, i64 key0, i64 q_len,
                                  i64 k_len) {
  using Mods = typename Config::Mods;
  const i32 lane = dev::lane_id();
  // ALiBi with one head per block (pack 1, the forward): one slope, and the
  // distance i + Sk - Sq - j of this thread's first row and key, every
  // element's a compile-time offset from it.
  float distance_base = 0.0f;
  if constexpr (Mods::kMayAlibi) {
    if (p.mods.alibi && p.pack == 1) {
      distance_base = static_cast<float>(static_cast<i32>(row0 + k_len - q_len - key0) + frag::acc_row(lane, 0) -
                                         frag::acc_col(lane, 0));
    }
  }
  ATTUNE_UNROLL
  for (int mt = 0; mt < Config::kMTiles; ++mt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      const i64 row = row0 + mt * 16 + frag::acc_row(lane, half);
      const KeyBounds bounds = kMasked ? key_bounds(p.mask, row / p.pack, q_len, k_len) : KeyBounds{0, k_len};
      // ALiBi: the row's slope, and the distance of this thread's first key
      // of the tile (each element's is an offset from it). Packed query
      // heads (decode) have one slope and diagonal per row.
      float slope_log2 = 0.0f;
      float distance0 = 0.0f;
      if constexpr (Mods::kMayAlibi) {
        if (p.mods.alibi) {
          if (p.pack == 1) {
            slope_log2 = p.mods.slope0_log2;
            distance0 = distance_base + static_cast<float>(mt * 16 + 8 * half);
          } else {
            slope_log2 = dev::load_global(p.mods.slope + row % p.pack) * kLog2e;
            distance0 =
                static_cast<float>(static_cast<i32>(row / p.pack + k_len - q_len - key0) - frag::acc_col(lane, 0));
          }
        }
      }
      ATTUNE_UNROLL
      for (int nt = 0; nt < Config::kNTiles; ++nt) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) {
          float x = modified_logit<Mods>(s.at(mt, nt, half, e), p.mods, p.scale_log2, slope_log2,
                                         distance0 - static_cast<float>(nt * 8 + e));
          if (kMasked) {
            const i64 key = key0 + nt * 8 + frag::acc_col(lane, e);
            if (key < bounds.begin || key >= bounds.end) x = -dev::infinity();
          }
          s.at(mt, nt, half, e) = x;
        }
      }
    }
  }
}

// The first n bits of a 64-bit word, 0 <= n <= kMax (a compile-time
// bound: below 64 one shift and one subtraction).
template <int kMax>
ATTUNE_DEVICE u64 low_bits(i32 n) {
  const u64 below = (1ULL << (n & 63)) - 1ULL;
  if constexpr (kMax < 64) {
    return below;
  } else {
    return n >= 64 ? ~0ULL : below;
  }
}

// The visible keys of the rows a thread holds, for kernels that fold the
// scale into the exponent (OnlineSoftmax::update_scores with a scale) and
// mask raw scores tile by tile. The thread's column j = 2 nt + e of a tile
// is key offset 8 nt + e from its first key, so the columns below key
// offset t number cols(t) = 2 floor(t / 8) + min(t mod 8, 2), and the
// next tile (kBlockN keys on, a multiple of 8) lowers that by the tile's
// columns. Each row's bounds are taken once, in 64 bits, as such counts
// from the first tile; tile i then masks with a clamp, two shifts and one
// select per score, in 32 bits (offsets within a sequence fit: sizes are
// int32). Tiles every row sees whole need no mask.
template <class Config>
struct RowWindows {
  static constexpr i32 kColumns = 2 * Config::kNTiles;  // this thread's per tile, at most 64 (256 keys)
  static_assert(kColumns <= 64, "RowWindows: at most 256 keys per warp");
  i32 from[Config::kMTiles][2];  // cols(first visible key), from the first tile
  i32 to[Config::kMTiles][2];    // cols(last visible key + 1)

  ATTUNE_DEVICE static i32 columns_below(i32 offset) { return 2 * (offset >> 3) + min2(offset & 7, 2); }

  ATTUNE_DEVICE void init(const MaskParams& mask, i64 row0, i64 key0, i64 q_len, i64 k_len) {
    const i32 lane = dev::lane_id();
    const i64 first_key = key0 + frag::acc_col(lane, 0);
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const KeyBounds b = key_bounds(mask, row0 + mt * 16 + frag::acc_row(lane, half), q_len, k_len);
        from[mt][half] = columns_below(static_cast<i32>(b.begin - first_key));
        to[mt][half] = columns_below(static_cast<i32>(b.end - first_key));
      }
    }
  }

  // -inf outside each row's keys in tile `tile` (counted from the first).
  ATTUNE_DEVICE void apply(typename Config::Scores& s, i32 tile) const {
    const i32 shift = tile * kColumns;
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const i32 lo = clamp(from[mt][half] - shift, 0, kColumns);
        const i32 hi = clamp(to[mt][half] - shift, 0, kColumns);
        const u64 visible = low_bits<kColumns>(hi) & ~low_bits<kColumns>(lo);
        ATTUNE_UNROLL
        for (int nt = 0; nt < Config::kNTiles; ++nt) {
          ATTUNE_UNROLL
          for (int e = 0; e < 2; ++e) {
            if ((visible & (1ULL << (2 * nt + e))) == 0) s.at(mt, nt, half, e) = -dev::infinity();
          }
        }
      }
    }
  }
};

// The A fragment of one 16-key step of P V (mma.sync, or wgmma with A from
// registers): the accumulators of two adjacent 8-key tiles of the same rows
// are exactly its layout, packed to the storage dtype.
template <class D>
ATTUNE_DEVICE void pack_a_fragment(const float (&p0)[4], const float (&p1)[4], u32 (&a)[4]) {
  a[0] = dev::pack2<D>(p0[0], p0[1]);
  a[1] = dev::pack2<D>(p0[2], p0[3]);
  a[2] = dev::pack2<D>(p1[0], p1[1]);
  a[3] = dev::pack2<D>(p1[2], p1[3]);
}

// u += P V: the S accumulators of two adjacent 8-key tiles are exactly the A
// fragment of one 16-key step.
template <class Config>
ATTUNE_DEVICE void accumulate_pv(const typename Config::Scores& p, const u16* v_s,
                                 float (&u)[Config::kMTiles][Config::kDTiles][4], i32 warp_key0) {
  using D = typename Config::DType;
  using KvTile = typename Config::KvTile;
  const i32 lane = dev::lane_id();
  const auto v_at = KvTile::lane(warp_key0 + frag::x4_row(lane), frag::x4_col(lane));
  ATTUNE_UNROLL
  for (int ps = 0; ps < Config::kPSteps; ++ps) {
    u32 a[Config::kMTiles][4];
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      pack_a_fragment<D>(p.tile(mt, 2 * ps), p.tile(mt, 2 * ps + 1), a[mt]);
    }
    // V's B fragments, two 8-column tiles per ldmatrix.x4.trans.
    ATTUNE_UNROLL
    for (int dt = 0; dt < Config::kDTiles; dt += 2) {
      u32 b[4];
      dev::warp::ldmatrix_x4_trans(b, v_s + v_at.at(ps * 16, dt * 8));
      const u32 b0[2] = {b[0], b[1]};
      const u32 b1[2] = {b[2], b[3]};
      ATTUNE_UNROLL
      for (int mt = 0; mt < Config::kMTiles; ++mt) {
        dev::warp::mma_m16n8k16<D>(u[mt][dt], a[mt], b0, u[mt][dt]);
        dev::warp::mma_m16n8k16<D>(u[mt][dt + 1], a[mt], b1, u[mt][dt + 1]);
      }
    }
  }
}

// One K/V tile, step by step: scores, scale and mask by global position,
// the softmax update, then P V.
template <class Config, bool kMasked, class Q>
ATTUNE_DEVICE void attend_tile(const Q& q, const u16* k_s, const u16* v_s, typename Config::Softmax& softmax,
                               const TileMask& mask, i64 row0, i64 key0, i64 q_len, i64 k_len) {
  const i32 warp_key0 = (dev::warp_id() % Config::kWarpsN) * Config::kWarpKeys;
  typename Config::Scores s;
  tile_scores<Config>(q, k_s, s, warp_key0);
  scale_and_mask<Config, kMasked>(s, mask, row0 + q.warp_row0, key0 + warp_key0, q_len, k_len);
  softmax.update(s.tiles);
  if constexpr (Config::Mods::kMayDropout) {  // after m and l: the saved LSE is the one without dropout
    if (mask.drop.on) drop_probabilities(s.tiles, mask.drop.stream, row0 + q.warp_row0, key0 + warp_key0);
  }
  accumulate_pv<Config>(s, v_s, softmax.u, warp_key0);
}

// The key loop of a block whose Q tile copy has been issued and committed:
// K/V tiles [n_begin, n_end) stream through kStages shared buffers, `issue(n)`
// copying tile n into its stage (and committing a possibly empty group, so the
// count stays uniform); each tile is attended once it has landed, without the
// mask when every row of the block (whose visible keys are `keys`) sees all
// of it.
template <class Config, class Issue>
ATTUNE_DEVICE void attend_key_tiles(const u16* q_s, const u16* k_s, const u16* v_s, typename Config::Softmax& softmax,
                                    const TileMask& mask, i64 row0, i64 n_begin, i64 n_end, const RowBlockKeys& keys,
                                    i64 q_len, i64 k_len, const Issue& issue) {
  QFragments<Config> q{q_s, (dev::warp_id() / Config::kWarpsN) * Config::kWarpRows};
  for (i64 n = n_begin; n < n_begin + Config::kStages - 1; ++n) issue(n);
  for (i64 n = n_begin; n < n_end; ++n) {
    issue(n + Config::kStages - 1);
    dev::cp_async::wait<Config::kStages - 1>();  // tile n (and Q) landed
    dev::block::sync();
    if (n == n_begin) q.load();  // Q has landed: keep it in registers when the variant does
    const i32 stage = static_cast<i32>(n % Config::kStages);
    const i64 key0 = n * Config::kBlockN;
    const u16* k_tile = k_s + stage * Config::kTileElems;
    const u16* v_tile = v_s + stage * Config::kTileElems;
    // Every valid row of the block sees every key of the tile: no mask.
    if (keys.sees_all(key0, Config::kBlockN)) {
      attend_tile<Config, false>(q, k_tile, v_tile, softmax, mask, row0, key0, q_len, k_len);
    } else {
      attend_tile<Config, true>(q, k_tile, v_tile, softmax, mask, row0, key0, q_len, k_len);
    }
    dev::block::sync();  // the stage is overwritten next
  }
}

// A row's state another warp left in shared memory: u at `at`, then m, l.
struct StoredRow {
  const float* at;
  float m;
  float l;
  ATTUNE_DEVICE float u(i32 col) const { return dev::load_shared(at + col); }
};

// After the key loop: completes each row's l over its quad and, with
// kWarpsN > 1, merges the states of the warps holding other keys of the
// same rows into the warp with warp_n == 0, through shared memory (the
// pipeline buffers, no longer in use), by the softmax's one rule. Returns
// whether this thread holds merged rows; the others are done.
template <class Config>
ATTUNE_DEVICE bool merge_warps(typename Config::Softmax& softmax) {
  using Softmax = typename Config::Softmax;
  softmax.merge_quad();
  if (Config::kWarpsN == 1) return true;
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_n = warp % Config::kWarpsN;
  const i32 warp_row0 = (warp / Config::kWarpsN) * Config::kWarpRows;
  // One slot of kHeadDim + 2 floats per (other warp, row): u, then m and l.
  float* merge = dev::shared_memory<float>();
  constexpr int kRowFloats = Config::kHeadDim + 2;
  const auto slot = [&](i32 w, i32 row) { return merge + ((w - 1) * Config::kBlockM + warp_row0 + row) * kRowFloats; };
  if (warp_n > 0) {
    softmax.for_each_row(lane, [&](i32 row, const typename Softmax::Row& r) {
      float* out = slot(warp_n, row);
      ATTUNE_UNROLL
      for (int dt = 0; dt < Config::kDTiles; ++dt) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) dev::store_shared(out + Softmax::column(lane, dt, e), r.u[dt][e]);
      }
      if (frag::row_leader(lane)) {
        dev::store_shared(out + Config::kHeadDim, r.m);
        dev::store_shared(out + Config::kHeadDim + 1, r.l);
      }
    });
  }
  dev::block::sync();
  if (warp_n > 0) return false;
  for (int w = 1; w < Config::kWarpsN; ++w) {
    softmax.merge_rows(lane, [&](i32 row) {
      const float* at = slot(w, row);
      return StoredRow{at, dev::load_shared(at + Config::kHeadDim), dev::load_shared(at + Config::kHeadDim + 1)};
    });
  }
  return true;
}

// Stores the finished rows this thread holds: O = u / l in the storage
// dtype and LSE (natural log, -inf for a row that saw no key), or, with
// `partial`, the unnormalized state (u, m, l) as floats for a later merge.
// out(row) gives the destinations of block row `row` as a RowOut.
struct RowOut {
  u16* o;                       // null: a row past the end, not stored
  float* lse;                   // may be null
  float* partial;               // [Dv + 2] floats: u, m, l (with `partial`)
  const float* sink = nullptr;  // the row's head's sink logit (Mods with sinks); joins O and LSE, not partials
  float keep_scale = 1.0f;      // Mods with dropout: 1 / (1 - p), applied to O (not to partials)
  float v_descale = 1.0f;       // Config::kMayFp8: V's descale, applied to O and to a partial's u
};

template <class Config, class Out>
ATTUNE_DEVICE void store_rows(const typename Config::Softmax& softmax, i32 head_dim_v, bool partial, const Out& out) {
  using D = typename Config::DType;
  using Softmax = typename Config::Softmax;
  const i32 lane = dev::lane_id();
  const i32 warp_row0 = (dev::warp_id() / Config::kWarpsN) * Config::kWarpRows;
  softmax.for_each_row(lane, [&](i32 row, const typename Softmax::Row& r) {
    const RowOut to = out(warp_row0 + row);
    if (to.o == nullptr) return;
    // Normalize once (with the sink's term in the denominator when there is one).
    softmax::RowEnd end = softmax::finalize(r.m, r.l);
    if constexpr (Config::Mods::kMaySinks) {
      if (!partial && to.sink != nullptr)
        end = softmax::finalize_with_sink(r.m, r.l, dev::load_global(to.sink) * kLog2e);
    }
    if constexpr (Config::Mods::kMayDropout) end.inv_l *= to.keep_scale;
    float u_scale = 1.0f;  // a partial's u carries V's descale; the splits' merge is linear in u
    if constexpr (Config::kMayFp8) {
      end.inv_l *= to.v_descale;
      u_scale = to.v_descale;
    }
    ATTUNE_UNROLL
    for (int dt = 0; dt < Config::kDTiles; ++dt) {
      ATTUNE_UNROLL
      for (int e = 0; e < 2; ++e) {
        const i32 col = Softmax::column(lane, dt, e);
        if (col >= head_dim_v) continue;
        if (partial) {
          dev::store_global(to.partial + col, Config::kMayFp8 ? r.u[dt][e] * u_scale : r.u[dt][e]);
        } else {
          dev::store_global(to.o + col, dev::to_bits<D>(r.u[dt][e] * end.inv_l));
        }
      }
    }
    if (!frag::row_leader(lane)) return;
    if (partial) {
      dev::store_global(to.partial + head_dim_v, r.m);
      dev::store_global(to.partial + head_dim_v + 1, r.l);
    } else if (to.lse != nullptr) {
      dev::store_global(to.lse, end.lse);
    }
  });
}

}  // namespace flash_detail

}  // namespace attune
