// The tile machinery shared by the attention kernels (forward, split-KV
// decode): sizes of a block's tiles, tile loads, the online-softmax step of
// one K/V tile on mma.sync, and the merge of the warps' row states.
#pragma once

#include "templates/mask.h"
#include "templates/primitives/primitives.h"

namespace attune {

// Every size of a variant, derived from its tunables in one place.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_, class DType_>
struct TileConfig {
  using DType = DType_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;

  static constexpr int kThreads = kWarpsM * kWarpsN * kWarpSize;
  static constexpr int kWarpRows = kBlockM / kWarpsM;  // query rows per warp
  static constexpr int kWarpKeys = kBlockN / kWarpsN;  // keys per warp per tile
  static constexpr int kMTiles = kWarpRows / 16;       // mma rows
  static constexpr int kNTiles = kWarpKeys / 8;        // S columns (keys)
  static constexpr int kKSteps = kHeadDim / 16;        // QK^T reduction steps
  static constexpr int kPSteps = kWarpKeys / 16;       // PV reduction steps
  static constexpr int kDTiles = kHeadDim / 8;         // O columns
  static constexpr int kChunks = kHeadDim / 8;         // 16-byte chunks per row
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kTileElems = kBlockN * kHeadDim;
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

namespace flash_detail {

// Copies a tile of `rows` x kHeadDim elements into shared memory (row pitch
// kHeadDim); rows >= rows_valid and columns >= cols_valid are zero. Row r
// starts at row_address(r): tensors whose rows are not evenly spaced (paged
// caches, packed query heads) load through the same code.
template <class Config, int kRows, class RowAddress>
ATTUNE_DEVICE void load_rows(u16* dst, const RowAddress& row_address, i64 rows_valid, i32 cols_valid, bool vectorized) {
  const i32 tid = dev::linear_thread();
  for (i32 c = tid; c < kRows * Config::kChunks; c += Config::kThreads) {
    const i32 row = c / Config::kChunks;
    const i32 col = (c % Config::kChunks) * 8;
    const bool row_ok = row < rows_valid;
    const i32 cols = row_ok ? (cols_valid - col < 8 ? cols_valid - col : 8) : 0;
    const i32 valid = cols > 0 ? cols : 0;
    u16* to = dst + row * Config::kHeadDim + col;
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

// load_rows for rows `row_stride` elements apart from `src`.
template <class Config, int kRows>
ATTUNE_DEVICE void load_tile(u16* dst, const u16* src, i64 row_stride, i64 rows_valid, i32 cols_valid,
                             bool vectorized) {
  load_rows<Config, kRows>(
      dst, [&](i32 row) { return src + row * row_stride; }, rows_valid, cols_valid, vectorized);
}

// Running softmax state of the rows a thread holds: two rows per m-tile
// (lane/4 and lane/4 + 8), in base-2 units.
template <class Config>
struct RowState {
  float m[Config::kMTiles][2];  // max logit so far, -inf when no key yet
  float l[Config::kMTiles][2];  // this thread's part of sum 2^(s - m)
};

// exp2 reference point for a row whose maximum may still be -inf: keeps
// -inf - -inf out of the arithmetic.
ATTUNE_DEVICE float safe_max(float m) { return m == -dev::infinity() ? 0.0f : m; }

ATTUNE_DEVICE float max2(float a, float b) { return a > b ? a : b; }

// What attend_tile needs of the problem: the mask band, the softmax scale in
// base 2, and how block rows map to query positions (row / pack: `pack`
// query heads of one position sit in consecutive rows, 1 when unpacked).
struct TileMask {
  MaskParams mask;
  float scale_log2;
  i32 pack;
};

// One K/V tile: S = Q K^T, mask, online softmax, O += P V.
template <class Config, bool kMasked>
ATTUNE_DEVICE void attend_tile(const u16* q_s, const u16* k_s, const u16* v_s,
                               float (&acc)[Config::kMTiles][Config::kDTiles][4], RowState<Config>& state,
                               const TileMask& p, i64 row0, i64 key0, i64 q_len, i64 k_len) {
  using D = typename Config::DType;
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_row0 = (warp / Config::kWarpsN) * Config::kWarpRows;
  const i32 warp_key0 = (warp % Config::kWarpsN) * Config::kWarpKeys;

  float s[Config::kMTiles][Config::kNTiles][4];
  ATTUNE_UNROLL
  for (int mt = 0; mt < Config::kMTiles; ++mt) {
    ATTUNE_UNROLL
    for (int nt = 0; nt < Config::kNTiles; ++nt) {
      ATTUNE_UNROLL
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
    }
  }

  // S = Q K^T over the head dimension, 16 at a time.
  ATTUNE_UNROLL
  for (int ks = 0; ks < Config::kKSteps; ++ks) {
    u32 a[Config::kMTiles][4];
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      const i32 row = warp_row0 + mt * 16 + lane % 8 + 8 * ((lane / 8) % 2);
      dev::warp::ldmatrix_x4(a[mt], q_s + row * Config::kHeadDim + ks * 16 + 8 * (lane / 16));
    }
    ATTUNE_UNROLL
    for (int nt = 0; nt < Config::kNTiles; ++nt) {
      u32 b[2];
      const i32 key = warp_key0 + nt * 8 + lane % 8;
      dev::warp::ldmatrix_x2(b, k_s + key * Config::kHeadDim + ks * 16 + 8 * ((lane / 8) % 2));
      ATTUNE_UNROLL
      for (int mt = 0; mt < Config::kMTiles; ++mt) dev::warp::mma_m16n8k16<D>(s[mt][nt], a[mt], b, s[mt][nt]);
    }
  }

  // Scale to base 2, mask by global positions, and update the row states.
  ATTUNE_UNROLL
  for (int mt = 0; mt < Config::kMTiles; ++mt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      const i64 row = row0 + warp_row0 + mt * 16 + lane / 4 + 8 * half;
      const KeyBounds bounds = kMasked ? key_bounds(p.mask, row / p.pack, q_len, k_len) : KeyBounds{0, k_len};
      float tile_max = -dev::infinity();
      ATTUNE_UNROLL
      for (int nt = 0; nt < Config::kNTiles; ++nt) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) {
          float x = s[mt][nt][2 * half + e] * p.scale_log2;
          if (kMasked) {
            const i64 key = key0 + warp_key0 + nt * 8 + 2 * (lane % 4) + e;
            if (key < bounds.begin || key >= bounds.end) x = -dev::infinity();
          }
          s[mt][nt][2 * half + e] = x;
          tile_max = max2(tile_max, x);
        }
      }
      // The four lanes of a quad hold the same row.
      tile_max = max2(tile_max, dev::warp::shfl_xor(tile_max, 1));
      tile_max = max2(tile_max, dev::warp::shfl_xor(tile_max, 2));
      const float new_max = max2(state.m[mt][half], tile_max);
      const float ref = safe_max(new_max);
      // Rescale BOTH the normalizer and the accumulated output.
      const float factor = dev::exp2_approx(state.m[mt][half] - ref);
      float sum = 0.0f;
      ATTUNE_UNROLL
      for (int nt = 0; nt < Config::kNTiles; ++nt) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float prob = dev::exp2_approx(s[mt][nt][2 * half + e] - ref);
          s[mt][nt][2 * half + e] = prob;
          sum += prob;
        }
      }
      state.l[mt][half] = state.l[mt][half] * factor + sum;
      state.m[mt][half] = new_max;
      ATTUNE_UNROLL
      for (int dt = 0; dt < Config::kDTiles; ++dt) {
        acc[mt][dt][2 * half] *= factor;
        acc[mt][dt][2 * half + 1] *= factor;
      }
    }
  }

  // O += P V: the S accumulators of two adjacent key tiles are exactly the A
  // fragment of one 16-key step.
  ATTUNE_UNROLL
  for (int ps = 0; ps < Config::kPSteps; ++ps) {
    u32 a[Config::kMTiles][4];
    ATTUNE_UNROLL
    for (int mt = 0; mt < Config::kMTiles; ++mt) {
      a[mt][0] = dev::pack2<D>(s[mt][2 * ps][0], s[mt][2 * ps][1]);
      a[mt][1] = dev::pack2<D>(s[mt][2 * ps][2], s[mt][2 * ps][3]);
      a[mt][2] = dev::pack2<D>(s[mt][2 * ps + 1][0], s[mt][2 * ps + 1][1]);
      a[mt][3] = dev::pack2<D>(s[mt][2 * ps + 1][2], s[mt][2 * ps + 1][3]);
    }
    ATTUNE_UNROLL
    for (int dt = 0; dt < Config::kDTiles; ++dt) {
      u32 b[2];
      const i32 key = warp_key0 + ps * 16 + lane % 8 + 8 * ((lane / 8) % 2);
      dev::warp::ldmatrix_x2_trans(b, v_s + key * Config::kHeadDim + dt * 8);
      ATTUNE_UNROLL
      for (int mt = 0; mt < Config::kMTiles; ++mt) dev::warp::mma_m16n8k16<D>(acc[mt][dt], a[mt], b, acc[mt][dt]);
    }
  }
}

// Empty row states and output accumulators: m = -inf, l = 0, u = 0.
template <class Config>
ATTUNE_DEVICE void init_row_state(float (&acc)[Config::kMTiles][Config::kDTiles][4], RowState<Config>& state) {
  ATTUNE_UNROLL
  for (int mt = 0; mt < Config::kMTiles; ++mt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      state.m[mt][half] = -dev::infinity();
      state.l[mt][half] = 0.0f;
    }
    ATTUNE_UNROLL
    for (int dt = 0; dt < Config::kDTiles; ++dt) {
      ATTUNE_UNROLL
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.0f;
    }
  }
}

// The key loop of a block whose Q tile copy has been issued and committed:
// K/V tiles [n_begin, n_end) stream through kStages shared buffers, `issue(n)`
// copying tile n into its stage (and committing a possibly empty group, so the
// count stays uniform); each tile is attended once it has landed, without the
// mask when every row of the block (whose visible keys run from `first` to
// `last`) sees all of it.
template <class Config, class Issue>
ATTUNE_DEVICE void attend_key_tiles(const u16* q_s, const u16* k_s, const u16* v_s,
                                    float (&acc)[Config::kMTiles][Config::kDTiles][4], RowState<Config>& state,
                                    const TileMask& mask, i64 row0, i64 n_begin, i64 n_end, const KeyBounds& first,
                                    const KeyBounds& last, i64 q_len, i64 k_len, const Issue& issue) {
  for (i64 n = n_begin; n < n_begin + Config::kStages - 1; ++n) issue(n);
  for (i64 n = n_begin; n < n_end; ++n) {
    issue(n + Config::kStages - 1);
    dev::cp_async::wait<Config::kStages - 1>();  // tile n (and Q) landed
    dev::block::sync();
    const i32 stage = static_cast<i32>(n % Config::kStages);
    const i64 key0 = n * Config::kBlockN;
    const u16* k_tile = k_s + stage * Config::kTileElems;
    const u16* v_tile = v_s + stage * Config::kTileElems;
    // Every valid row of the block sees every key of the tile: no mask.
    if (key0 >= last.begin && key0 + Config::kBlockN <= first.end) {
      attend_tile<Config, false>(q_s, k_tile, v_tile, acc, state, mask, row0, key0, q_len, k_len);
    } else {
      attend_tile<Config, true>(q_s, k_tile, v_tile, acc, state, mask, row0, key0, q_len, k_len);
    }
    dev::block::sync();  // the stage is overwritten next
  }
}

// After the key loop: completes each row's normalizer over its quad and,
// with kWarpsN > 1, merges the (m, l, u) of the warps holding other keys of
// the same rows into the warp with warp_n == 0, through shared memory (the
// pipeline buffers, no longer in use). Returns whether this thread holds
// merged rows; the others are done.
template <class Config>
ATTUNE_DEVICE bool merge_row_states(float (&acc)[Config::kMTiles][Config::kDTiles][4], RowState<Config>& state) {
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_n = warp % Config::kWarpsN;
  const i32 warp_row0 = (warp / Config::kWarpsN) * Config::kWarpRows;

  // Complete the normalizers over the quad.
  ATTUNE_UNROLL
  for (int r = 0; r < 2 * Config::kMTiles; ++r) {  // the rows this thread holds
    const int mt = r / 2;
    const int half = r % 2;
    state.l[mt][half] += dev::warp::shfl_xor(state.l[mt][half], 1);
    state.l[mt][half] += dev::warp::shfl_xor(state.l[mt][half], 2);
  }

  if (Config::kWarpsN > 1) {
    // Warps holding other keys of the same rows hand over (m, l, u).
    float* merge = dev::shared_memory<float>();
    constexpr int kRowFloats = Config::kHeadDim + 2;
    if (warp_n > 0) {
      ATTUNE_UNROLL
      for (int r = 0; r < 2 * Config::kMTiles; ++r) {  // the rows this thread holds
        const int mt = r / 2;
        const int half = r % 2;
        const i32 row = warp_row0 + mt * 16 + lane / 4 + 8 * half;
        float* slot = merge + ((warp_n - 1) * Config::kBlockM + row) * kRowFloats;
        ATTUNE_UNROLL
        for (int dt = 0; dt < Config::kDTiles; ++dt) {
          dev::store_shared(slot + dt * 8 + 2 * (lane % 4), acc[mt][dt][2 * half]);
          dev::store_shared(slot + dt * 8 + 2 * (lane % 4) + 1, acc[mt][dt][2 * half + 1]);
        }
        if (lane % 4 == 0) {
          dev::store_shared(slot + Config::kHeadDim, state.m[mt][half]);
          dev::store_shared(slot + Config::kHeadDim + 1, state.l[mt][half]);
        }
      }
    }
    dev::block::sync();
    if (warp_n > 0) return false;
    ATTUNE_UNROLL
    for (int r = 0; r < 2 * Config::kMTiles; ++r) {  // the rows this thread holds
      const int mt = r / 2;
      const int half = r % 2;
      const i32 row = warp_row0 + mt * 16 + lane / 4 + 8 * half;
      float new_max = state.m[mt][half];
      for (int w = 1; w < Config::kWarpsN; ++w) {
        new_max =
            max2(new_max, dev::load_shared(merge + ((w - 1) * Config::kBlockM + row) * kRowFloats + Config::kHeadDim));
      }
      const float ref = safe_max(new_max);
      const float own = dev::exp2_approx(state.m[mt][half] - ref);
      state.l[mt][half] *= own;
      ATTUNE_UNROLL
      for (int dt = 0; dt < Config::kDTiles; ++dt) {
        acc[mt][dt][2 * half] *= own;
        acc[mt][dt][2 * half + 1] *= own;
      }
      for (int w = 1; w < Config::kWarpsN; ++w) {
        const float* slot = merge + ((w - 1) * Config::kBlockM + row) * kRowFloats;
        const float factor = dev::exp2_approx(dev::load_shared(slot + Config::kHeadDim) - ref);
        state.l[mt][half] += factor * dev::load_shared(slot + Config::kHeadDim + 1);
        ATTUNE_UNROLL
        for (int dt = 0; dt < Config::kDTiles; ++dt) {
          acc[mt][dt][2 * half] += factor * dev::load_shared(slot + dt * 8 + 2 * (lane % 4));
          acc[mt][dt][2 * half + 1] += factor * dev::load_shared(slot + dt * 8 + 2 * (lane % 4) + 1);
        }
      }
      state.m[mt][half] = new_max;
    }
  }

  return true;
}

}  // namespace flash_detail

}  // namespace attune
