// Forward attention, FlashAttention-2 style.
//
// K and V are per sequence [B, Sk, Hkv, D], packed (cu_seqlens_k), or a
// paged cache read through its block table (chunked prefill over a cache).
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

#include "templates/flash_fwd_params.h"
#include "templates/flash_tile.cuh"

namespace attune {

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
  static constexpr int kQRegs[] = {0, 1};  // 1: Q fragments stay in registers across the key tiles
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "wm", "wn", "st", "qr"};

  // Register model (fitted to ptxas on sm_90a, see docs/kernels.md): the O
  // accumulators cost one register per float, the S tile about 1.5 (its
  // masks and exponentials keep temporaries alive), Q fragments held in
  // registers one per 32-bit word; past this budget ptxas spills. Wider key
  // slices than 64 per warp spill whatever the budget.
  static constexpr int kRegisterBudget = 152;
  static constexpr int kMaxWarpKeyTiles = 8;

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int /*block_m*/, int /*block_n*/, int warps_m,
                                                  int warps_n, int /*stages*/, int /*q_regs*/) {
    return warps_m * warps_n * kWarpSize;
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int /*warps_m*/,
                                                       int warps_n, int stages, int /*q_regs*/) {
    // Q tile, then `stages` K tiles, then `stages` V tiles (16-bit elements);
    // after the main loop the same bytes hold the partial states of the
    // warps with warp_n > 0 (floats: o, then m and l per row).
    const int pipeline = 2 * (block_m * head_dim + 2 * stages * block_n * head_dim);
    const int merge = 4 * (warps_n - 1) * block_m * (head_dim + 2);
    return pipeline > merge ? pipeline : merge;
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int warps_m, int warps_n,
                                                 int stages, int q_regs) {
    const int warp_rows = block_m / warps_m;
    const int warp_keys = block_n / warps_n;
    const int m_tiles = warp_rows / 16;
    const int key_tiles = warp_keys / 8;
    const int registers =
        m_tiles * (head_dim / 8) * 4 + m_tiles * key_tiles * 6 + (q_regs != 0 ? m_tiles * (head_dim / 16) * 4 : 0);
    return block_m % warps_m == 0 && block_n % warps_n == 0 && warp_rows % 16 == 0 && warp_keys % 16 == 0 &&
           head_dim % 16 == 0 && stages >= 1 && stages <= 4 && warps_m * warps_n <= 8 &&
           key_tiles <= kMaxWarpKeyTiles && registers <= kRegisterBudget && (q_regs == 0 || q_regs == 1);
  }
};

// Grid: (ceil(max query rows / kBlockM), Hq, B); block: threads(); dynamic
// shared memory: shared_bytes() (FlashFwdTunables). kSoftcap, kSinks,
// kAlibi: the score modifiers compiled in (score_mods.cuh). kPaged: K and V
// read through p.pages' block table; like the modifiers a feature the
// problem chooses (0 off, 1 on, kAtRunTime: as p.pages says), so variants
// without it compile to the code they had before paging existed. kDropout:
// attention dropout (templates/dropout.h), the same kind of feature. kFp8:
// fp8 inputs (Fp8Inputs: Q, K and V, or K and V alone), widened to DType
// as they load; a variant with it still reads 16-bit tensors as before.
template <int kHeadDim, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, int kQRegs, class DType,
          int kSoftcap, int kSinks, int kAlibi, int kPaged, int kDropout = 0, int kFp8 = 0>
ATTUNE_KERNEL void flash_fwd(FlashFwdParams p) {
  using Mods = ScoreMods<kSoftcap, kSinks, kAlibi, kDropout>;
  using Config = TileConfig<kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, DType, kQRegs != 0, Mods, kFp8>;
  static_assert(FlashFwdTunables::valid(kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kQRegs),
                "flash_fwd: these tunables break FlashFwdTunables::valid");
  const i32 m_block = dev::block_index().x;
  const i32 head = dev::block_index().y;
  const i32 batch = dev::block_index().z;
  const i32 kv_head = head / p.group_size;

  // This sequence's rows and keys, by global position; the key tiles any row
  // of the block can see.
  const Sequence seq = sequence_of({p.cu_seqlens_q, p.cu_seqlens_k, p.seqlens_k, p.seqlen_q, p.seqlen_k}, batch);
  const i64 row0 = static_cast<i64>(m_block) * Config::kBlockM;
  if (row0 >= seq.q_len) return;  // the whole block leaves together
  const RowBlockKeys keys =
      row_block_keys(p.mask, row0, last_row_of(row0, Config::kBlockM, seq.q_len), seq.q_len, seq.k_len);
  const i64 n_begin = keys.tile_begin<Config::kBlockN>();
  const i64 n_end = keys.tile_end<Config::kBlockN>();

  u16* smem = dev::shared_memory<u16>();
  u16* q_s = smem;
  u16* k_s = smem + Config::kQElems;
  u16* v_s = k_s + Config::kStages * Config::kTileElems;
  const bool vectorized = p.vectorized != 0;
  // fp8: the stored formats, and q and k's descales folded into the scale.
  const i32 q_format = Config::kMayFp8 ? p.fp8.q_format : kStored16;
  const i32 kv_format = Config::kMayFp8 ? p.fp8.kv_format : kStored16;
  const float scale_log2 = Config::kMayFp8 ? p.scale_log2 * p.fp8.score_factor(batch, kv_head) : p.scale_log2;
  const flash_detail::TileMask tile_mask{p.mask, scale_log2, 1, block_score_mods<Mods>(p.mods, scale_log2, batch, head),
                                         block_dropout<Mods>(p.dropout, batch, head, p.heads_q)};

  const i64 q_first = batch * p.q_batch_stride + (seq.q_begin + row0) * p.q_row_stride + head * p.q_head_stride;
  const i64 k_first = batch * p.k_batch_stride + seq.k_begin * p.k_row_stride + kv_head * p.k_head_stride;
  const i64 v_first = batch * p.v_batch_stride + seq.k_begin * p.v_row_stride + kv_head * p.v_head_stride;
  const u16* q_rows = p.q + batch * p.q_batch_stride + (seq.q_begin + row0) * p.q_row_stride + head * p.q_head_stride;
  const u16* k_rows = p.k + batch * p.k_batch_stride + seq.k_begin * p.k_row_stride + kv_head * p.k_head_stride;
  const u16* v_rows = p.v + batch * p.v_batch_stride + seq.k_begin * p.v_row_stride + kv_head * p.v_head_stride;
  const auto issue = [&](i64 n) {
    if (n < n_end) {
      const i32 stage = static_cast<i32>(n % Config::kStages);
      const i64 key0 = n * Config::kBlockN;
      const bool paged = kPaged == kAtRunTime ? p.pages.block_table != nullptr : kPaged != 0;
      if (Config::kMayFp8 && kv_format != kStored16) {  // the stored bytes, widened as they load
        using flash_detail::stored_bytes;
        if (!paged) {
          flash_detail::load_tile<Config, Config::kBlockN>(
              k_s + stage * Config::kTileElems, stored_bytes(p.k) + k_first + key0 * p.k_row_stride, p.k_row_stride,
              seq.k_len - key0, p.head_dim_k, vectorized, kv_format);
          flash_detail::load_tile<Config, Config::kBlockN>(
              v_s + stage * Config::kTileElems, stored_bytes(p.v) + v_first + key0 * p.v_row_stride, p.v_row_stride,
              seq.k_len - key0, p.head_dim_v, vectorized, kv_format);
        } else {
          flash_detail::load_cache_kv<Config>(
              k_s + stage * Config::kTileElems, v_s + stage * Config::kTileElems, p.pages,
              flash_detail::CacheRows<u8>{stored_bytes(p.k), p.k_batch_stride, p.k_row_stride,
                                          kv_head * p.k_head_stride},
              flash_detail::CacheRows<u8>{stored_bytes(p.v), p.v_batch_stride, p.v_row_stride,
                                          kv_head * p.v_head_stride},
              batch, key0, seq.k_len - key0, p.head_dim_k, p.head_dim_v, vectorized, kv_format);
        }
      } else if (!paged) {
        flash_detail::load_tile<Config, Config::kBlockN>(k_s + stage * Config::kTileElems,
                                                         k_rows + key0 * p.k_row_stride, p.k_row_stride,
                                                         seq.k_len - key0, p.head_dim_k, vectorized);
        flash_detail::load_tile<Config, Config::kBlockN>(v_s + stage * Config::kTileElems,
                                                         v_rows + key0 * p.v_row_stride, p.v_row_stride,
                                                         seq.k_len - key0, p.head_dim_v, vectorized);
      } else {  // each key's row through the block table
        flash_detail::load_cache_kv<Config>(
            k_s + stage * Config::kTileElems, v_s + stage * Config::kTileElems, p.pages,
            flash_detail::CacheRows<u16>{p.k, p.k_batch_stride, p.k_row_stride, kv_head * p.k_head_stride},
            flash_detail::CacheRows<u16>{p.v, p.v_batch_stride, p.v_row_stride, kv_head * p.v_head_stride}, batch, key0,
            seq.k_len - key0, p.head_dim_k, p.head_dim_v, vectorized);
      }
    }
    dev::cp_async::commit();  // possibly empty: keeps the group count uniform
  };

  typename Config::Softmax softmax;
  softmax.init();
  if (n_begin < n_end) {
    if (Config::kMayFp8 && q_format != kStored16) {
      flash_detail::load_tile<Config, Config::kBlockM>(q_s, flash_detail::stored_bytes(p.q) + q_first, p.q_row_stride,
                                                       seq.q_len - row0, p.head_dim_k, vectorized, q_format);
    } else {
      flash_detail::load_tile<Config, Config::kBlockM>(q_s, q_rows, p.q_row_stride, seq.q_len - row0, p.head_dim_k,
                                                       vectorized);
    }
    dev::cp_async::commit();
    flash_detail::attend_key_tiles<Config>(q_s, k_s, v_s, softmax, tile_mask, row0, n_begin, n_end, keys, seq.q_len,
                                           seq.k_len, issue);
  }

  if (!flash_detail::merge_warps<Config>(softmax)) return;
  const float v_descale = Config::kMayFp8 ? p.fp8.output_factor(batch, kv_head) : 1.0f;
  // Normalize once; a row with no visible key is 0 with LSE = -inf (the
  // sink with sinks).
  flash_detail::store_rows<Config>(softmax, p.head_dim_v, /*partial=*/false, [&](i32 r) {
    const i64 row = row0 + r;
    if (row >= seq.q_len) return flash_detail::RowOut{nullptr, nullptr, nullptr};
    u16* o = p.o + batch * p.o_batch_stride + (seq.q_begin + row) * p.o_row_stride + head * p.o_head_stride;
    float* lse = p.lse == nullptr ? nullptr
                                  : p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride +
                                        (seq.q_begin + row) * p.lse_row_stride;
    return flash_detail::RowOut{o, lse, nullptr, tile_mask.mods.sink, tile_mask.drop.scale, v_descale};
  });
}

}  // namespace attune
