// Forward attention, FlashAttention-2 style.
//
// A block (CTA) owns kBlockM query rows of one (batch, head). K and V tiles of
// kBlockN keys stream through shared memory in a kStages-deep cp.async
// pipeline. Warps form a kWarpsM x kWarpsN grid: a warp owns kBlockM/kWarpsM
// rows and kBlockN/kWarpsN keys of each tile; S = Q K^T and O += P V run on
// mma.sync m16n8k16. Each warp keeps the online-softmax state (m, l, u) of its
// rows over its keys; with kWarpsN > 1 the partial states merge through shared
// memory at the end by the same rule. Rows and keys are global positions of
// their sequence; tiles nobody can see are skipped, tiles everybody sees skip
// the mask.
#pragma once

#include "templates/mask.h"
#include "templates/primitives/primitives.h"

namespace attune {

// Problem sizes and pointers of one forward call (device memory). Strides
// are in elements; index arrays are null when unused.
struct FlashFwdParams {
  const u16* q;  // [B, Sq, Hq, Dk] or packed [Tq, Hq, Dk]
  const u16* k;  // [B, Sk, Hkv, Dk]
  const u16* v;  // [B, Sk, Hkv, Dv]
  u16* o;        // [B, Sq, Hq, Dv]
  float* lse;    // [B, Hq, Sq] or packed [Hq, Tq]; null: not written
  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_row_stride, lse_head_stride;
  const i32* cu_seqlens_q;  // [B+1] packed row offsets
  const i32* cu_seqlens_k;  // [B+1]
  const i32* seqlens_k;     // [B] real keys per sequence (padding)
  i32 seqlen_q;             // dense Sq
  i32 seqlen_k;             // dense Sk
  i32 heads_q;
  i32 group_size;  // Hq / Hkv
  i32 head_dim_k;
  i32 head_dim_v;
  MaskParams mask;
  float scale_log2;  // softmax scale * log2(e): the kernel works in base 2
  i32 vectorized;    // 1: every row starts 16-byte aligned, so tiles load with cp.async
};

// The tunable space of flash_fwd, read by attune-gen: one array per
// template parameter of the kernel (same name, same order) with the values it
// may take, the variant-id key of each, and the constraints every variant
// must meet whatever the GPU (the architecture's limits are applied by the
// enumerator from threads() and shared_bytes()).
struct FlashFwdTunables {
  static constexpr int kHeadDim[] = {32, 64, 96, 128, 160, 192, 224, 256};  // Dk and Dv padded up to it
  static constexpr int kBlockM[] = {64, 128};                               // query rows per block
  static constexpr int kBlockN[] = {32, 64, 128};                           // keys per tile
  static constexpr int kWarpsM[] = {2, 4, 8};                               // warps along the rows
  static constexpr int kWarpsN[] = {1, 2};                                  // warps along the keys of a tile
  static constexpr int kStages[] = {1, 2, 3, 4};                            // cp.async pipeline depth
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "wm", "wn", "st"};

  // Register model (fitted to ptxas on sm_90a, see docs/kernels.md): the O
  // accumulators cost one register per float, the S tile about 1.5 (its
  // masks and exponentials keep temporaries alive); past this budget ptxas
  // spills. Wider key slices than 64 per warp spill whatever the budget.
  static constexpr int kRegisterBudget = 152;
  static constexpr int kMaxWarpKeyTiles = 8;

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int /*block_m*/, int /*block_n*/, int warps_m,
                                                  int warps_n, int /*stages*/) {
    return warps_m * warps_n * kWarpSize;
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int /*warps_m*/,
                                                       int warps_n, int stages) {
    // Q tile, then `stages` K tiles, then `stages` V tiles (16-bit elements);
    // after the main loop the same bytes hold the partial states of the
    // warps with warp_n > 0 (floats: o, then m and l per row).
    const int pipeline = 2 * (block_m * head_dim + 2 * stages * block_n * head_dim);
    const int merge = 4 * (warps_n - 1) * block_m * (head_dim + 2);
    return pipeline > merge ? pipeline : merge;
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int warps_m, int warps_n,
                                                 int stages) {
    const int warp_rows = block_m / warps_m;
    const int warp_keys = block_n / warps_n;
    const int m_tiles = warp_rows / 16;
    const int key_tiles = warp_keys / 8;
    const int registers = m_tiles * (head_dim / 8) * 4 + m_tiles * key_tiles * 6;
    return block_m % warps_m == 0 && block_n % warps_n == 0 && warp_rows % 16 == 0 && warp_keys % 16 == 0 &&
           head_dim % 16 == 0 && stages >= 1 && stages <= 4 && warps_m * warps_n <= 8 &&
           key_tiles <= kMaxWarpKeyTiles && registers <= kRegisterBudget;
  }
};

// Every size of a variant, derived from its tunables in one place.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_, class DType_>
struct FlashFwdConfig {
  using DType = DType_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;

  static constexpr int kThreads = FlashFwdTunables::threads(kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages);
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
  static constexpr int kSharedBytes =
      FlashFwdTunables::shared_bytes(kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages);
  static constexpr bool kValid = FlashFwdTunables::valid(kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages);
};

namespace flash_detail {

// Copies a tile of `rows` x kHeadDim elements into shared memory (row pitch
// kHeadDim); rows >= rows_valid and columns >= cols_valid are zero.
template <class Config, int kRows>
ATTUNE_DEVICE void load_tile(u16* dst, const u16* src, i64 row_stride, i64 rows_valid, i32 cols_valid,
                             bool vectorized) {
  const i32 tid = dev::linear_thread();
  for (i32 c = tid; c < kRows * Config::kChunks; c += Config::kThreads) {
    const i32 row = c / Config::kChunks;
    const i32 col = (c % Config::kChunks) * 8;
    const bool row_ok = row < rows_valid;
    const i32 cols = row_ok ? (cols_valid - col < 8 ? cols_valid - col : 8) : 0;
    const i32 valid = cols > 0 ? cols : 0;
    u16* to = dst + row * Config::kHeadDim + col;
    const u16* from = src + (row_ok ? row * row_stride + col : 0);
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

// One K/V tile: S = Q K^T, mask, online softmax, O += P V.
template <class Config, bool kMasked>
ATTUNE_DEVICE void attend_tile(const u16* q_s, const u16* k_s, const u16* v_s,
                               float (&acc)[Config::kMTiles][Config::kDTiles][4], RowState<Config>& state,
                               const FlashFwdParams& p, i64 row0, i64 key0, i64 q_len, i64 k_len) {
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
      const KeyBounds bounds = key_bounds(p.mask, row, q_len, k_len);
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

}  // namespace flash_detail

// Grid: (ceil(max query rows / kBlockM), Hq, B); block: threads(); dynamic
// shared memory: shared_bytes() (FlashFwdTunables).
template <int kHeadDim, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, class DType>
ATTUNE_KERNEL void flash_fwd(FlashFwdParams p) {
  using Config = FlashFwdConfig<kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, DType>;
  static_assert(Config::kValid, "flash_fwd: these tunables break FlashFwdTunables::valid");
  using D = typename Config::DType;
  using flash_detail::RowState;
  const i32 m_block = dev::block_index().x;
  const i32 head = dev::block_index().y;
  const i32 batch = dev::block_index().z;
  const i32 kv_head = head / p.group_size;

  // This sequence's rows and keys, by global position.
  i64 q_begin = 0;
  i64 k_begin = 0;
  i64 q_len = p.seqlen_q;
  i64 k_len = p.seqlen_k;
  if (p.cu_seqlens_q != nullptr) {
    q_begin = dev::load_global(p.cu_seqlens_q + batch);
    q_len = dev::load_global(p.cu_seqlens_q + batch + 1) - q_begin;
    k_begin = dev::load_global(p.cu_seqlens_k + batch);
    k_len = dev::load_global(p.cu_seqlens_k + batch + 1) - k_begin;
  }
  if (p.seqlens_k != nullptr) k_len = dev::load_global(p.seqlens_k + batch);
  const i64 row0 = static_cast<i64>(m_block) * Config::kBlockM;
  if (row0 >= q_len) return;  // the whole block leaves together
  const i64 last_row = row0 + Config::kBlockM - 1 < q_len - 1 ? row0 + Config::kBlockM - 1 : q_len - 1;

  // Key tiles any row of the block can see.
  const KeyBounds first = key_bounds(p.mask, row0, q_len, k_len);
  const KeyBounds last = key_bounds(p.mask, last_row, q_len, k_len);
  const i64 n_begin = first.begin / Config::kBlockN;
  const i64 n_end = last.end > first.begin ? (last.end + Config::kBlockN - 1) / Config::kBlockN : n_begin;

  u16* smem = dev::shared_memory<u16>();
  u16* q_s = smem;
  u16* k_s = smem + Config::kQElems;
  u16* v_s = k_s + Config::kStages * Config::kTileElems;
  const bool vectorized = p.vectorized != 0;

  const u16* q_rows = p.q + batch * p.q_batch_stride + (q_begin + row0) * p.q_row_stride + head * p.q_head_stride;
  const u16* k_rows = p.k + batch * p.k_batch_stride + k_begin * p.k_row_stride + kv_head * p.k_head_stride;
  const u16* v_rows = p.v + batch * p.v_batch_stride + k_begin * p.v_row_stride + kv_head * p.v_head_stride;
  const auto issue = [&](i64 n) {
    if (n < n_end) {
      const i32 stage = static_cast<i32>(n % Config::kStages);
      const i64 key0 = n * Config::kBlockN;
      flash_detail::load_tile<Config, Config::kBlockN>(k_s + stage * Config::kTileElems, k_rows + key0 * p.k_row_stride,
                                                       p.k_row_stride, k_len - key0, p.head_dim_k, vectorized);
      flash_detail::load_tile<Config, Config::kBlockN>(v_s + stage * Config::kTileElems, v_rows + key0 * p.v_row_stride,
                                                       p.v_row_stride, k_len - key0, p.head_dim_v, vectorized);
    }
    dev::cp_async::commit();  // possibly empty: keeps the group count uniform
  };

  float acc[Config::kMTiles][Config::kDTiles][4];
  RowState<Config> state;
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

  if (n_begin < n_end) {
    flash_detail::load_tile<Config, Config::kBlockM>(q_s, q_rows, p.q_row_stride, q_len - row0, p.head_dim_k,
                                                     vectorized);
    dev::cp_async::commit();
    for (i64 n = n_begin; n < n_begin + Config::kStages - 1; ++n) issue(n);
    for (i64 n = n_begin; n < n_end; ++n) {
      issue(n + Config::kStages - 1);
      dev::cp_async::wait<Config::kStages - 1>();  // tile n (and Q) landed
      dev::block::sync();
      const i32 stage = static_cast<i32>(n % Config::kStages);
      const i64 key0 = n * Config::kBlockN;
      // Every valid row of the block sees every key of the tile: no mask.
      const bool unmasked = key0 >= last.begin && key0 + Config::kBlockN <= first.end;
      if (unmasked) {
        flash_detail::attend_tile<Config, false>(q_s, k_s + stage * Config::kTileElems,
                                                 v_s + stage * Config::kTileElems, acc, state, p, row0, key0, q_len,
                                                 k_len);
      } else {
        flash_detail::attend_tile<Config, true>(q_s, k_s + stage * Config::kTileElems, v_s + stage * Config::kTileElems,
                                                acc, state, p, row0, key0, q_len, k_len);
      }
      dev::block::sync();  // the stage is overwritten next
    }
  }

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
    if (warp_n > 0) return;
    ATTUNE_UNROLL
    for (int r = 0; r < 2 * Config::kMTiles; ++r) {  // the rows this thread holds
      const int mt = r / 2;
      const int half = r % 2;
      const i32 row = warp_row0 + mt * 16 + lane / 4 + 8 * half;
      float new_max = state.m[mt][half];
      for (int w = 1; w < Config::kWarpsN; ++w) {
        new_max = flash_detail::max2(
            new_max, dev::load_shared(merge + ((w - 1) * Config::kBlockM + row) * kRowFloats + Config::kHeadDim));
      }
      const float ref = flash_detail::safe_max(new_max);
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

  // Normalize once; a row with no visible key is 0 with LSE = -inf.
  constexpr float kLn2 = 0.6931471805599453f;
  ATTUNE_UNROLL
  for (int r = 0; r < 2 * Config::kMTiles; ++r) {  // the rows this thread holds
    const int mt = r / 2;
    const int half = r % 2;
    const i64 row = row0 + warp_row0 + mt * 16 + lane / 4 + 8 * half;
    if (row >= q_len) continue;
    const float l = state.l[mt][half];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    u16* o_row = p.o + batch * p.o_batch_stride + (q_begin + row) * p.o_row_stride + head * p.o_head_stride;
    ATTUNE_UNROLL
    for (int dt = 0; dt < Config::kDTiles; ++dt) {
      ATTUNE_UNROLL
      for (int e = 0; e < 2; ++e) {
        const i32 col = dt * 8 + 2 * (lane % 4) + e;
        if (col < p.head_dim_v) dev::store_global(o_row + col, dev::to_bits<D>(acc[mt][dt][2 * half + e] * inv));
      }
    }
    if (p.lse != nullptr && lane % 4 == 0) {
      const float lse = l > 0.0f ? (state.m[mt][half] + dev::log2_approx(l)) * kLn2 : -dev::infinity();
      dev::store_global(
          p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride + (q_begin + row) * p.lse_row_stride, lse);
    }
  }
}

}  // namespace attune
