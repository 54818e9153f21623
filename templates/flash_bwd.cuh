// Backward attention, FlashAttention-2 style: flash_bwd here, and around it
// the row kernels of flash_bwd_rows.cuh:
//
//   flash_bwd_preprocess  D_i = dO_i . O_i per query row (fp32), and zeroes
//                         the fp32 dQ accumulator when dQ is summed with
//                         atomics.
//   flash_bwd             a CTA owns kBlockN keys of one (sequence, KV head),
//                         holds their K and V tiles in shared memory and dK,
//                         dV in registers, and loops over the query tiles of
//                         every query head of the KV head's group (GQA: dK and
//                         dV sum over the group inside the CTA, no atomics).
//                         Per query tile, recomputed from Q, K and the saved
//                         LSE:
//                           S^T = K Q^T,  P^T = 2^(S^T scale_log2 - LSE_log2)
//                           dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D)
//                           dK += dS^T Q, dQ += dS K (fp32, unscaled)
//                         dQ goes to a [rows, Hq, Dk] fp32 accumulator with
//                         atomic adds (kDqAtomic = 1), or to this key block's
//                         slice of a [key blocks, rows, Hq, Dk] fp32 buffer
//                         (kDqAtomic = 0: no atomics, deterministic).
//   flash_bwd_dq_convert  dQ = scale x (the accumulator, or the sum of the
//                         key blocks' slices in a fixed order), stored in the
//                         storage dtype.
//   flash_bwd_dsink       with attention sinks: dsink_h = -sum_i
//                         e^(sink_h - LSE_i) D_i over every row of head h,
//                         in a fixed order (deterministic).
//
// Score modifiers (score_mods.cuh) enter where S^T is recomputed: softcap
// and ALiBi as in the forward, and the softcap's chain rule dS^T *= 1 - t^2
// (t = tanh of the scaled score over c). Sinks need nothing there: the
// saved LSE already holds the sink's term.
//
// Every product runs on mma.sync m16n8k16 with fp32 accumulators. The warps
// form a kWarpsM x kWarpsN grid that each product splits its own way:
//   S^T, dP^T  keys by kWarpsN, queries by kWarpsM   (A: K or V, B: Q or dO)
//   dV, dK     keys by kWarpsN, head dim by kWarpsM  (A: P^T or dS^T from
//              shared memory, B: dO or Q by ldmatrix.trans)
//   dQ         queries by kWarpsM, head dim by kWarpsN (A: dS by
//              ldmatrix.trans of dS^T, B: K by ldmatrix.trans)
// P^T and dS^T pass through shared memory in the storage dtype (rounded as
// FlashAttention rounds them), so every warp can read the slices it needs.
// Rows with no visible key (LSE = -inf) and rows past the sequence use
// LSE_log2 = +inf: their probabilities are exactly 0, never -inf - -inf.
#pragma once

#include "templates/flash_bwd_params.h"
#include "templates/flash_tile.cuh"

namespace attune {

namespace bwd_detail {

// Every size of a flash_bwd variant, derived from its tunables in one place
// (the tunables themselves as in every tiled kernel, TileTunables).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_, class DType_,
          class Mods_ = NoScoreMods>
struct BwdConfig : TileTunables<kHeadDim_, kBlockM_, kBlockN_, kWarpsM_, kWarpsN_, kStages_, DType_> {
  using Base = TileTunables<kHeadDim_, kBlockM_, kBlockN_, kWarpsM_, kWarpsN_, kStages_, DType_>;
  using Mods = Mods_;  // the score modifiers compiled in

  // S^T and dP^T: a warp's keys (16-row mma tiles) and queries (8 columns each).
  static constexpr int kWarpKeys = kBlockN_ / kWarpsN_;
  static constexpr int kKeyTiles = kWarpKeys / 16;
  static constexpr int kWarpQueries = kBlockM_ / kWarpsM_;
  static constexpr int kQueryTiles = kWarpQueries / 8;
  using KeysByQueries = frag::Accumulator<kKeyTiles, kQueryTiles>;  // S^T, dP^T
  static constexpr int kHeadSteps = kHeadDim_ / 16;                 // reduction over the head dim
  // dK and dV: the same keys, a slice of the head dim.
  static constexpr int kKvCols = kHeadDim_ / kWarpsM_;
  static constexpr int kKvColTiles = kKvCols / 8;
  using KeysByColumns = frag::Accumulator<kKeyTiles, kKvColTiles>;  // dK, dV
  static constexpr int kQuerySteps = kBlockM_ / 16;                 // reduction over the queries
  // dQ: the same queries (16-row tiles), a slice of the head dim.
  static constexpr int kDqRowTiles = kWarpQueries / 16;
  static constexpr int kDqCols = kHeadDim_ / kWarpsN_;
  static constexpr int kDqColTiles = kDqCols / 8;
  static constexpr int kKeySteps = kBlockN_ / 16;  // reduction over the keys
  // dQ column tiles computed and written at a time: at most 16 fp32
  // accumulators per thread (each chunk reloads dS^T, a few ldmatrix).
  static constexpr int kDqChunk =
      kDqColTiles * kDqRowTiles * 4 <= 16 ? kDqColTiles : (4 / kDqRowTiles > 0 ? 4 / kDqRowTiles : 1);

  // Shared memory, 16-bit elements first: K, V, `kStages` Q and dO tiles,
  // P^T and dS^T ([key][query]); then floats: `kStages` LSE_log2 and D rows.
  // 16-column panels where 64 does not divide the head dim: the warps'
  // column blocks (d96 in 48s) then step by XOR (fewer spills than 32).
  template <int kRows>
  using HeadDimTile = SmemTile<kRows, kHeadDim_, 16>;
  using KvTile = HeadDimTile<kBlockN_>;        // K, V
  using QTile = HeadDimTile<kBlockM_>;         // one stage of Q or of dO
  using PTile = SmemTile<kBlockN_, kBlockM_>;  // P^T, dS^T: [key][query]
  static constexpr int kKvElems = KvTile::kElems;
  static constexpr int kQElems = QTile::kElems;
  static constexpr int kPElems = PTile::kElems;
  static constexpr int kHalfElems = 2 * kKvElems + 2 * kStages_ * kQElems + 2 * kPElems;
};

// Whether a variant compiles in a feature attend_keys handles element by
// element: softcap, ALiBi or dropout (sinks only change dsink).
template <class Mods>
inline constexpr bool kElementMods = Mods::kMaySoftcap || Mods::kMayAlibi || Mods::kMayDropout;

// What attend_keys needs of the problem beyond the tiles: the mask and the
// scale, and with such features compiled in (kWithMods) the modifiers of the
// step's query head (its ALiBi slope in log2 units) and its dropout stream.
// Without them it is the struct it was before modifiers existed: those
// variants compile as before.
template <bool kWithMods>
struct KeyMask {
  MaskParams mask;
  float scale_log2;
};

template <>
struct KeyMask<true> {
  MaskParams mask;
  float scale_log2;
  BlockScoreMods mods;
  float slope_log2;
  BlockDropout drop;  // the stream of the step's head
  u32 head_word0;     // the stream's counter word of head 0: batch Hq
};

template <class Mods>
ATTUNE_DEVICE KeyMask<kElementMods<Mods>> key_mask_of(const FlashBwdParams& p, i32 batch) {
  if constexpr (kElementMods<Mods>) {
    KeyMask<true> m{p.mask,
                    p.scale_log2,
                    block_score_mods<Mods>(p.mods, p.scale_log2, batch, 0),
                    0.0f,
                    block_dropout<Mods>(p.dropout, batch, 0, p.heads_q),
                    0};
    m.head_word0 = m.drop.stream.head_word;
    return m;
  } else {
    return {p.mask, p.scale_log2};
  }
}

// The mask of one step's query head: with ALiBi, that head's slope; with
// dropout, its stream.
ATTUNE_DEVICE KeyMask<true> for_head(KeyMask<true> m, i64 head) {
  if (m.mods.alibi) m.slope_log2 = dev::load_global(m.mods.slope + head) * kLog2e;
  m.drop.stream.head_word = m.head_word0 + static_cast<u32>(head);
  return m;
}

// Dropout's keep bits of this thread's elements of S^T (bit 2 qt + c of
// bits[kt][half]: key row (kt, half), query (qt, c)), the forward's mask
// regenerated. `query0`, `key0`: the warp's first query and key within the
// sequence. The forward's Philox groups pair queries i and i + 8 of one key
// (i mod 16 < 8), and the warp's queries are whole 16-row groups, so one
// call serves two query tiles. The calls run one at a time (a rolled loop),
// so their chains do not pile up registers.
template <class Config>
ATTUNE_DEVICE void dropout_keep_bits(u32 (&bits)[Config::kKeyTiles][2], const DropoutStream& stream, i64 query0,
                                     i64 key0) {
  static_assert(Config::kWarpQueries % 16 == 0, "a warp's queries are whole 16-row groups (as dQ's tiles need)");
  const i32 lane = dev::lane_id();
  ATTUNE_UNROLL
  for (int kt = 0; kt < Config::kKeyTiles; ++kt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      const i64 key = key0 + Config::KeysByQueries::row(lane, kt, half);
      const bool odd = (key & 1) != 0;
      u32 b = 0;
      ATTUNE_ROLLED
      for (int q = 0; q < Config::kQueryTiles / 2; ++q) {
        ATTUNE_UNROLL
        for (int c = 0; c < 2; ++c) {
          // Query tile 2q holds words 0 and 1 of the group, tile 2q + 1 (8 queries on) words 2 and 3.
          const philox::U32x4 w = stream.group(query0 + 16 * q + frag::acc_col(lane, c), key);
          b |= (stream.keeps_word(odd ? w.x[1] : w.x[0]) ? 1u : 0u) << (4 * q + c);
          b |= (stream.keeps_word(odd ? w.x[3] : w.x[2]) ? 1u : 0u) << (4 * q + 2 + c);
        }
      }
      bits[kt][half] = b;
    }
  }
}

// S^T = K Q^T and dP^T = V dO^T for this warp's keys and queries, then
// P^T = 2^(S^T scale_log2 - LSE_log2) (0 where masked) and
// dS^T = P^T (dP^T - D), both stored to shared memory as [key][query] in the
// storage dtype.
template <class Config, bool kMasked>
ATTUNE_DEVICE void attend_keys(const u16* k_s, const u16* v_s, const u16* q_s, const u16* do_s, const float* lse_s,
                               const float* d_s, u16* p_s, u16* ds_s,
                               const KeyMask<kElementMods<typename Config::Mods>>& m, i64 row0, i64 key0, i64 q_len,
                               i64 k_len) {
  using D = typename Config::DType;
  using KvTile = typename Config::KvTile;
  using QTile = typename Config::QTile;
  using PTile = typename Config::PTile;
  using Mods = typename Config::Mods;
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_key0 = (warp % Config::kWarpsN) * Config::kWarpKeys;
  const i32 warp_query0 = (warp / Config::kWarpsN) * Config::kWarpQueries;

  typename Config::KeysByQueries s;
  typename Config::KeysByQueries dp;
  s.fill(0.0f);
  dp.fill(0.0f);

  // Both products reduce over the head dim, 16 at a time; keys are the A
  // rows (ldmatrix.x4 of K or V), queries the B columns (ldmatrix.x2 of Q
  // or dO, whose rows are the columns' k values). One product at a time
  // keeps fewer fragments alive.
  auto a_at = KvTile::lane(warp_key0 + frag::x4_row(lane), frag::x4_col(lane));
  a_at.full = dev::opaque(a_at.full);
  auto b_at = QTile::lane(warp_query0 + frag::x2_row(lane), frag::x2_col(lane));
  b_at.full = dev::opaque(b_at.full);
  const auto product = [&](const u16* a_s, const u16* b_s, typename Config::KeysByQueries& acc) {
    ATTUNE_UNROLL
    for (int ks = 0; ks < Config::kHeadSteps; ++ks) {
      u32 a[Config::kKeyTiles][4];
      ATTUNE_UNROLL
      for (int kt = 0; kt < Config::kKeyTiles; ++kt) dev::warp::ldmatrix_x4(a[kt], a_s + a_at.at(kt * 16, ks * 16));
      ATTUNE_UNROLL
      for (int qt = 0; qt < Config::kQueryTiles; ++qt) {
        u32 b[2];
        dev::warp::ldmatrix_x2(b, b_s + b_at.at(qt * 8, ks * 16));
        ATTUNE_UNROLL
        for (int kt = 0; kt < Config::kKeyTiles; ++kt)
          dev::warp::mma_m16n8k16<D>(acc.tile(kt, qt), a[kt], b, acc.tile(kt, qt));
      }
    }
  };
  product(k_s, q_s, s);
  product(v_s, do_s, dp);

  u32 keep_bits[Config::kKeyTiles][2] = {};
  if constexpr (Mods::kMayDropout) {
    if (m.drop.on) dropout_keep_bits<Config>(keep_bits, m.drop.stream, row0 + warp_query0, key0 + warp_key0);
  }

  // A thread holds keys frag::acc_row of each key tile and the two queries
  // frag::acc_col of each query tile: the pair is one 32-bit store.
  ATTUNE_UNROLL
  for (int qt = 0; qt < Config::kQueryTiles; ++qt) {
    ATTUNE_UNROLL
    for (int c = 0; c < 2; ++c) {
      const i32 query = warp_query0 + Config::KeysByQueries::col(lane, qt, c);
      const float lse = dev::load_shared(lse_s + query);
      const float row_d = dev::load_shared(d_s + query);
      // ALiBi: the distance i + Sk - Sq - j of this thread's first key j
      // (each element's is an offset from it, as in the forward).
      float distance0 = 0.0f;
      if constexpr (Mods::kMayAlibi) {
        if (m.mods.alibi) {
          distance0 = static_cast<float>(static_cast<i32>(row0 + query + k_len - q_len - key0 - warp_key0) -
                                         frag::acc_row(lane, 0));
        }
      }
      // The row's visible keys relative to this warp's first key, clamped
      // to the warp's keys: 32-bit compares per element.
      i32 begin = 0;
      i32 end = Config::kWarpKeys;
      if (kMasked) {
        const KeyWindow window = key_window(key_bounds(m.mask, row0 + query, q_len, k_len), key0 + warp_key0, end);
        begin = window.begin;
        end = window.end;
      }
      ATTUNE_UNROLL
      for (int kt = 0; kt < Config::kKeyTiles; ++kt) {
        ATTUNE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const i32 key = Config::KeysByQueries::row(lane, kt, half);
          const bool visible = !kMasked || (key >= begin && key < end);
          if constexpr (kElementMods<Mods>) {
            // The forward's logit, modifiers included; t: the softcap's tanh.
            const float raw = s.at(kt, qt, half, c);
            float x = raw * m.scale_log2;
            float t = 0.0f;
            if (m.mods.softcap) {
              t = dev::tanh_approx(raw * m.mods.softcap_in);
              x = t * m.mods.softcap_out;
            }
            if (m.mods.alibi) x -= alibi_penalty(m.slope_log2, distance0 - static_cast<float>(kt * 16 + 8 * half));
            const float prob = visible ? dev::exp2_approx(x - lse) : 0.0f;
            // Dropout: the forward's mask, regenerated; P^T (for dV) is the
            // dropped and scaled P, dP scaled alike, dS = P (dP - D) with
            // the P before dropout.
            float kept = prob;
            float dprob = dp.at(kt, qt, half, c);
            if constexpr (Mods::kMayDropout) {
              if (m.drop.on) {
                const bool keep = ((keep_bits[kt][half] >> (2 * qt + c)) & 1u) != 0;
                kept = keep ? prob * m.drop.scale : 0.0f;
                dprob = keep ? dprob * m.drop.scale : 0.0f;
              }
            }
            s.at(kt, qt, half, c) = kept;
            float ds = prob * (dprob - row_d);
            if (m.mods.softcap) ds *= 1.0f - t * t;  // d(c tanh(x / c)) / dx
            dp.at(kt, qt, half, c) = ds;
          } else {  // the code as it was before modifiers, so variants without them compile to the same SASS
            const float prob = visible ? dev::exp2_approx(s.at(kt, qt, half, c) * m.scale_log2 - lse) : 0.0f;
            s.at(kt, qt, half, c) = prob;
            dp.at(kt, qt, half, c) = prob * (dp.at(kt, qt, half, c) - row_d);
          }
        }
      }
    }
  }
  // The warp's queries are a power-of-two block, so stepping by query tile
  // flips chunk bits the warp's first query leaves clear (one P^T panel).
  auto p_at = PTile::lane(warp_key0 + frag::acc_row(lane, 0), warp_query0 + frag::acc_col(lane, 0));
  p_at.full = dev::opaque(p_at.full);
  ATTUNE_UNROLL
  for (int kt = 0; kt < Config::kKeyTiles; ++kt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      ATTUNE_UNROLL
      for (int qt = 0; qt < Config::kQueryTiles; ++qt) {
        const i32 at = p_at.at(kt * 16 + 8 * half, qt * 8);
        dev::store_shared(dev::shared_as<u32>(p_s + at), dev::pack2<D>(s.at(kt, qt, half, 0), s.at(kt, qt, half, 1)));
        dev::store_shared(dev::shared_as<u32>(ds_s + at),
                          dev::pack2<D>(dp.at(kt, qt, half, 0), dp.at(kt, qt, half, 1)));
      }
    }
  }
}

// dV += P^T dO and dK += dS^T Q for this warp's keys and head-dim slice,
// reducing over the tile's queries; one product at a time.
template <class Config>
ATTUNE_DEVICE void accumulate_kv(const u16* p_s, const u16* ds_s, const u16* q_s, const u16* do_s,
                                 typename Config::KeysByColumns& dk, typename Config::KeysByColumns& dv) {
  using D = typename Config::DType;
  using QTile = typename Config::QTile;
  using PTile = typename Config::PTile;
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_key0 = (warp % Config::kWarpsN) * Config::kWarpKeys;
  const i32 col0 = (warp / Config::kWarpsN) * Config::kKvCols;
  // acc += A B: A = [key][query] in shared memory, B = [query][column].
  auto a_at = PTile::lane(warp_key0 + frag::x4_row(lane), frag::x4_col(lane));
  a_at.full = dev::opaque(a_at.full);
  // Column steps from the warp's slice are XOR steps where the layout allows
  // (SmemTile::xor_steps_within); otherwise each address is computed.
  constexpr bool kXorSteps = QTile::xor_steps_within(Config::kKvCols);
  auto b_at = QTile::lane(frag::x4_row(lane), col0);
  b_at.full = dev::opaque(b_at.full);
  const auto product = [&](const u16* a_s, const u16* b_s, typename Config::KeysByColumns& acc) {
    ATTUNE_UNROLL
    for (int qs = 0; qs < Config::kQuerySteps; ++qs) {
      u32 a[Config::kKeyTiles][4];
      ATTUNE_UNROLL
      for (int kt = 0; kt < Config::kKeyTiles; ++kt) dev::warp::ldmatrix_x4(a[kt], a_s + a_at.at(kt * 16, qs * 16));
      const i32 query = qs * 16 + frag::x4_row(lane);
      ATTUNE_UNROLL
      for (int ct = 0; ct < Config::kKvColTiles; ++ct) {
        u32 b[2];
        dev::warp::ldmatrix_x2_trans(
            b, b_s + (kXorSteps ? b_at.at(qs * 16, ct * 8) : QTile::offset(query, col0 + ct * 8)));
        ATTUNE_UNROLL
        for (int kt = 0; kt < Config::kKeyTiles; ++kt)
          dev::warp::mma_m16n8k16<D>(acc.tile(kt, ct), a[kt], b, acc.tile(kt, ct));
      }
    }
  };
  product(p_s, do_s, dv);
  product(ds_s, q_s, dk);
}

// dQ = dS K for this warp's queries and column tiles [kCol0, kCol0 +
// kCols) of its head-dim slice, reducing over the block's keys: A is dS^T
// read transposed, B is K read transposed. The caller takes the slice in
// chunks (BwdConfig::kDqChunk) so that dQ's registers do not add to dK's and
// dV's at large head dims.
template <class Config, int kCol0, int kCols>
ATTUNE_DEVICE void tile_dq(const u16* ds_s, const u16* k_s, frag::Accumulator<Config::kDqRowTiles, kCols>& dq) {
  using D = typename Config::DType;
  using KvTile = typename Config::KvTile;
  using PTile = typename Config::PTile;
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_query0 = (warp / Config::kWarpsN) * Config::kWarpQueries;
  const i32 col0 = (warp % Config::kWarpsN) * Config::kDqCols;
  // As in accumulate_kv: the warp's queries are a power-of-two block; its
  // head-dim slice steps by XOR where the layout allows.
  constexpr bool kXorSteps = KvTile::xor_steps_within(Config::kDqCols);
  auto a_at = PTile::lane(frag::x4t_row(lane), warp_query0 + frag::x4t_col(lane));
  a_at.full = dev::opaque(a_at.full);
  auto b_at = KvTile::lane(frag::x4_row(lane), col0);
  b_at.full = dev::opaque(b_at.full);
  dq.fill(0.0f);
  ATTUNE_UNROLL
  for (int ks = 0; ks < Config::kKeySteps; ++ks) {
    u32 a[Config::kDqRowTiles][4];
    ATTUNE_UNROLL
    for (int rt = 0; rt < Config::kDqRowTiles; ++rt)
      dev::warp::ldmatrix_x4_trans(a[rt], ds_s + a_at.at(ks * 16, rt * 16));
    const i32 key = ks * 16 + frag::x4_row(lane);
    ATTUNE_UNROLL
    for (int c = 0; c < kCols; ++c) {
      const int ct = kCol0 + c;
      u32 b[2];
      dev::warp::ldmatrix_x2_trans(b,
                                   k_s + (kXorSteps ? b_at.at(ks * 16, ct * 8) : KvTile::offset(key, col0 + ct * 8)));
      ATTUNE_UNROLL
      for (int rt = 0; rt < Config::kDqRowTiles; ++rt)
        dev::warp::mma_m16n8k16<D>(dq.tile(rt, c), a[rt], b, dq.tile(rt, c));
    }
  }
}

// The dQ rows of one query tile this lane writes (null past the
// sequence), at the lane's first column of its head-dim slice, and how many
// columns of the head dim remain from there.
template <class Config>
struct DqRows {
  float* out[Config::kDqRowTiles][2];
  i32 cols_left;
};

// dQ of this warp's queries, column tiles from kCol0 on, a chunk
// (BwdConfig::kDqChunk) at a time: added to the fp32 accumulator
// (kDqAtomic) or stored to this key block's slice.
template <class Config, int kDqAtomic, int kCol0>
ATTUNE_DEVICE void write_dq(const u16* ds_s, const u16* k_s, const DqRows<Config>& rows) {
  constexpr int kCols = Config::kDqColTiles - kCol0 < Config::kDqChunk ? Config::kDqColTiles - kCol0 : Config::kDqChunk;
  frag::Accumulator<Config::kDqRowTiles, kCols> dq;
  tile_dq<Config, kCol0, kCols>(ds_s, k_s, dq);
  ATTUNE_UNROLL
  for (int rt = 0; rt < Config::kDqRowTiles; ++rt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      float* out = rows.out[rt][half];
      if (out == nullptr) continue;
      ATTUNE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) {
          const i32 col = (kCol0 + c) * 8 + e;  // from the lane's first column
          if (col >= rows.cols_left) continue;
          if (kDqAtomic != 0) {
            dev::atomic_add(out + col, dq.at(rt, c, half, e));
          } else {
            dev::store_global(out + col, dq.at(rt, c, half, e));
          }
        }
      }
    }
  }
  if constexpr (kCol0 + kCols < Config::kDqColTiles) write_dq<Config, kDqAtomic, kCol0 + kCols>(ds_s, k_s, rows);
}

}  // namespace bwd_detail

// The tunable space of flash_bwd (read by attune-gen).
struct FlashBwdTunables {
  static constexpr int kHeadDim[] = {32, 64, 96, 128, 160, 192, 224, 256};  // Dk and Dv padded up to it
  static constexpr int kBlockM[] = {16, 32, 64};                            // query rows per tile
  static constexpr int kBlockN[] = {32, 64, 128};                           // keys per block
  static constexpr int kWarpsM[] = {1, 2, 4};  // warps along the queries (S, dQ) and the head dim (dK, dV)
  static constexpr int kWarpsN[] = {2, 4};     // warps along the keys (S, dK, dV) and the head dim (dQ)
  static constexpr int kStages[] = {1, 2};     // Q / dO tiles in flight (cp.async)
  static constexpr int kDqAtomic[] = {0, 1};   // 1: dQ by fp32 atomics; 0: per key block, summed in order
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "wm", "wn", "st", "at"};

  // Register model (fitted to ptxas of NVRTC 13.0 on sm_90a over every
  // shape of head dims 32..256): fp32 accumulators per thread of dK and dV
  // (held over the whole loop) plus the larger of the S^T and dP^T tiles
  // and the dQ tile (one phase at a time). ptxas adds about 120 registers of
  // fragments and addresses to this; past the budget it spills. The 32 x 32
  // tile stays valid whatever its registers: the one shape of head dims 224
  // and 256 that fits the 99 KiB of shared memory of sm_86/89/120.
  static constexpr int kRegisterBudget = 144;

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int /*block_m*/, int /*block_n*/, int warps_m,
                                                  int warps_n, int /*stages*/, int /*dq_atomic*/) {
    return warps_m * warps_n * kWarpSize;
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int /*warps_m*/,
                                                       int /*warps_n*/, int stages, int /*dq_atomic*/) {
    // K, V, the Q and dO stages and P^T, dS^T (16-bit), then the LSE and D
    // stages (floats).
    return 2 * (2 * block_n * head_dim + 2 * stages * block_m * head_dim + 2 * block_n * block_m) +
           4 * 2 * stages * block_m;
  }
  ATTUNE_HOST_DEVICE static constexpr int registers(int head_dim, int block_m, int block_n, int warps_m, int warps_n) {
    const int threads = warps_m * warps_n * kWarpSize;
    const int kv = 2 * block_n * head_dim / threads;
    const int sdp = 2 * block_n * block_m / threads;
    const int dq = block_m * head_dim / threads;
    return kv + (sdp > dq ? sdp : dq);
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int warps_m, int warps_n,
                                                 int stages, int dq_atomic) {
    const int warps = warps_m * warps_n;
    return head_dim % 16 == 0 && block_n % (16 * warps_n) == 0 && block_m % (16 * warps_m) == 0 &&
           head_dim % (8 * warps_m) == 0 && head_dim % (8 * warps_n) == 0 && warps >= 4 && warps <= 8 && stages >= 1 &&
           stages <= 2 && (dq_atomic == 0 || dq_atomic == 1) &&
           (registers(head_dim, block_m, block_n, warps_m, warps_n) <= kRegisterBudget ||
            (block_m == 32 && block_n == 32));
  }
};

// Grid: (ceil(longest key capacity / kBlockN), Hkv, B); block: threads();
// dynamic shared memory: shared_bytes() (FlashBwdTunables). Needs D from
// flash_bwd_preprocess; dQ is finished by flash_bwd_dq_convert.
template <int kHeadDim, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, int kDqAtomic, class DType,
          int kSoftcap, int kAlibi, int kDropout = 0>
ATTUNE_KERNEL void flash_bwd(FlashBwdParams p) {
  static_assert(FlashBwdTunables::valid(kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kDqAtomic),
                "flash_bwd: these tunables break FlashBwdTunables::valid");
  using Mods = ScoreMods<kSoftcap, 0, kAlibi, kDropout>;
  using Config = bwd_detail::BwdConfig<kHeadDim, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, DType, Mods>;
  using D = DType;
  const i32 n_block = dev::block_index().x;
  const i32 kv_head = dev::block_index().y;
  const i32 batch = dev::block_index().z;
  const bwd_detail::BwdSequence seq = bwd_detail::sequence(p, batch);
  const i64 key0 = static_cast<i64>(n_block) * kBlockN;
  if (key0 >= seq.k_capacity) return;  // the whole block leaves together
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id();
  const i32 warp_key0 = (warp % kWarpsN) * Config::kWarpKeys;
  const i32 kv_col0 = (warp / kWarpsN) * Config::kKvCols;

  // Steps: every query tile that may see these keys, for each query head of
  // the group.
  const TileRange tiles = query_tiles<kBlockM, kBlockN>(p.mask, key0, seq.q_len, seq.k_len);
  const i64 tile_count = tiles.end - tiles.begin;
  const i64 steps = tile_count * p.group_size;

  u16* smem = dev::shared_memory<u16>();
  u16* k_s = smem;
  u16* v_s = k_s + Config::kKvElems;
  u16* q_s = v_s + Config::kKvElems;
  u16* do_s = q_s + kStages * Config::kQElems;
  u16* p_s = do_s + kStages * Config::kQElems;
  u16* ds_s = p_s + Config::kPElems;
  float* lse_s = dev::shared_as<float>(smem + Config::kHalfElems);
  float* d_s = lse_s + kStages * kBlockM;
  const bool vectorized = p.vectorized != 0;
  // The modifiers of the batch's heads (slopes from head 0; each step reads its head's).
  const auto key_mask = bwd_detail::key_mask_of<Mods>(p, batch);

  const auto issue = [&](i64 step) {
    if (step < steps) {
      const i32 stage = static_cast<i32>(step % kStages);
      const i64 head = static_cast<i64>(kv_head) * p.group_size + step / tile_count;
      const i64 row0 = (tiles.begin + step % tile_count) * kBlockM;
      const u16* q_rows =
          p.q + batch * p.q_batch_stride + (seq.q_begin + row0) * p.q_row_stride + head * p.q_head_stride;
      const u16* do_rows =
          p.d_o + batch * p.do_batch_stride + (seq.q_begin + row0) * p.do_row_stride + head * p.do_head_stride;
      flash_detail::load_tile<Config, kBlockM>(q_s + stage * Config::kQElems, q_rows, p.q_row_stride, seq.q_len - row0,
                                               p.head_dim_k, vectorized);
      flash_detail::load_tile<Config, kBlockM>(do_s + stage * Config::kQElems, do_rows, p.do_row_stride,
                                               seq.q_len - row0, p.head_dim_v, vectorized);
      // LSE in base 2; +inf for empty rows and rows past the sequence, so
      // their probabilities are 0. D is 0 there.
      for (i32 r = dev::linear_thread(); r < kBlockM; r += Config::kThreads) {
        const bwd_detail::RowStats rs = bwd_detail::row_stats(p, seq, batch, head, row0 + r);
        dev::store_shared(lse_s + stage * kBlockM + r, rs.lse_log2);
        dev::store_shared(d_s + stage * kBlockM + r, rs.d);
      }
    }
    dev::cp_async::commit();  // possibly empty: keeps the group count uniform
  };

  typename Config::KeysByColumns dk;
  typename Config::KeysByColumns dv;
  dk.fill(0.0f);
  dv.fill(0.0f);

  if (steps > 0) {
    const u16* k_rows = p.k + batch * p.k_batch_stride + (seq.k_begin + key0) * p.k_row_stride +
                        static_cast<i64>(kv_head) * p.k_head_stride;
    const u16* v_rows = p.v + batch * p.v_batch_stride + (seq.k_begin + key0) * p.v_row_stride +
                        static_cast<i64>(kv_head) * p.v_head_stride;
    flash_detail::load_tile<Config, kBlockN>(k_s, k_rows, p.k_row_stride, seq.k_len - key0, p.head_dim_k, vectorized);
    flash_detail::load_tile<Config, kBlockN>(v_s, v_rows, p.v_row_stride, seq.k_len - key0, p.head_dim_v, vectorized);
    dev::cp_async::commit();
    for (i64 step = 0; step < kStages - 1; ++step) issue(step);
    for (i64 step = 0; step < steps; ++step) {
      issue(step + kStages - 1);
      dev::cp_async::wait<kStages - 1>();  // this step's Q and dO (and K, V) landed
      dev::block::sync();
      const i32 stage = static_cast<i32>(step % kStages);
      const i64 head = static_cast<i64>(kv_head) * p.group_size + step / tile_count;
      const i64 row0 = (tiles.begin + step % tile_count) * kBlockM;
      const u16* q_t = q_s + stage * Config::kQElems;
      const u16* do_t = do_s + stage * Config::kQElems;
      const float* lse_t = lse_s + stage * kBlockM;
      const float* d_t = d_s + stage * kBlockM;

      // Every row of the tile sees every key of the block: no mask.
      const RowBlockKeys keys =
          row_block_keys(p.mask, row0, last_row_of(row0, kBlockM, seq.q_len), seq.q_len, seq.k_len);
      if constexpr (bwd_detail::kElementMods<Mods>) {
        const bwd_detail::KeyMask<true> head_mask = bwd_detail::for_head(key_mask, head);  // its slope and stream
        if (keys.sees_all(key0, kBlockN)) {
          bwd_detail::attend_keys<Config, false>(k_s, v_s, q_t, do_t, lse_t, d_t, p_s, ds_s, head_mask, row0, key0,
                                                 seq.q_len, seq.k_len);
        } else {
          bwd_detail::attend_keys<Config, true>(k_s, v_s, q_t, do_t, lse_t, d_t, p_s, ds_s, head_mask, row0, key0,
                                                seq.q_len, seq.k_len);
        }
      } else if (keys.sees_all(key0, kBlockN)) {
        bwd_detail::attend_keys<Config, false>(k_s, v_s, q_t, do_t, lse_t, d_t, p_s, ds_s, key_mask, row0, key0,
                                               seq.q_len, seq.k_len);
      } else {
        bwd_detail::attend_keys<Config, true>(k_s, v_s, q_t, do_t, lse_t, d_t, p_s, ds_s, key_mask, row0, key0,
                                              seq.q_len, seq.k_len);
      }
      dev::block::sync();  // P^T and dS^T complete

      bwd_detail::accumulate_kv<Config>(p_s, ds_s, q_t, do_t, dk, dv);
      bwd_detail::DqRows<Config> dq_rows;
      {
        const i32 warp_query0 = (warp / kWarpsN) * Config::kWarpQueries;
        const i32 lane_col = (warp % kWarpsN) * Config::kDqCols + frag::acc_col(lane, 0);
        float* dq_base =
            kDqAtomic != 0 ? p.dq_accum : p.dq_partial + static_cast<i64>(n_block) * p.rows * p.heads_q * p.head_dim_k;
        dq_rows.cols_left = p.head_dim_k - lane_col;
        ATTUNE_UNROLL
        for (int rt = 0; rt < Config::kDqRowTiles; ++rt) {
          ATTUNE_UNROLL
          for (int half = 0; half < 2; ++half) {
            const i64 row = row0 + warp_query0 + rt * 16 + frag::acc_row(lane, half);
            dq_rows.out[rt][half] = row < seq.q_len
                                        ? dq_base + ((seq.row_base + row) * p.heads_q + head) * p.head_dim_k + lane_col
                                        : nullptr;
          }
        }
      }
      bwd_detail::write_dq<Config, kDqAtomic, 0>(ds_s, k_s, dq_rows);
      dev::block::sync();  // the stage, P^T and dS^T are overwritten next
    }
  }

  // dK (scaled) and dV of this warp's keys; keys past the sequence's real
  // keys (padding) and keys no row sees get exact zeros.
  ATTUNE_UNROLL
  for (int kt = 0; kt < Config::kKeyTiles; ++kt) {
    ATTUNE_UNROLL
    for (int half = 0; half < 2; ++half) {
      const i64 key = key0 + warp_key0 + Config::KeysByColumns::row(lane, kt, half);
      if (key >= seq.k_capacity) continue;
      u16* dk_row = p.dk + batch * p.dk_batch_stride + (seq.k_begin + key) * p.dk_row_stride +
                    static_cast<i64>(kv_head) * p.dk_head_stride;
      u16* dv_row = p.dv + batch * p.dv_batch_stride + (seq.k_begin + key) * p.dv_row_stride +
                    static_cast<i64>(kv_head) * p.dv_head_stride;
      ATTUNE_UNROLL
      for (int ct = 0; ct < Config::kKvColTiles; ++ct) {
        ATTUNE_UNROLL
        for (int e = 0; e < 2; ++e) {
          const i32 col = kv_col0 + Config::KeysByColumns::col(lane, ct, e);
          if (col < p.head_dim_k) dev::store_global(dk_row + col, dev::to_bits<D>(dk.at(kt, ct, half, e) * p.scale));
          if (col < p.head_dim_v) dev::store_global(dv_row + col, dev::to_bits<D>(dv.at(kt, ct, half, e)));
        }
      }
    }
  }
}

}  // namespace attune
