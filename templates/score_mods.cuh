// Score modifiers (docs/contract.md, "Score modifiers"): logit softcapping,
// attention sinks and ALiBi, as compile-time features of the kernels.
//
// A kernel takes them as int template parameters after its dtype (kSoftcap,
// kSinks, kAlibi): 0 compiles the modifier out, so a variant without it is
// the code it was before modifiers existed; 1 compiles it in. The emulator
// instantiates each kernel once with kAtRunTime (-1), where a modifier is on
// when its parameter is set, so the emulator runs every combination without
// multiplying its instantiations.
#pragma once

#include "templates/dropout.h"
#include "templates/fragment.cuh"
#include "templates/numerics.cuh"
#include "templates/tunable.cuh"

namespace attune {

// The modifiers' values of one call (device memory), in natural-log units as
// the contract states them.
struct ScoreModParams {
  float softcap;              // c > 0; 0: off
  const float* sinks;         // [Hq] sink logits; null: off
  const float* alibi_slopes;  // [B, Hq] or [Hq]; null: off
  i64 alibi_batch_stride;     // Hq for [B, Hq], 0 for [Hq]
};

// kDropout: attention dropout (templates/dropout.h), the same kind of
// feature though it acts on the probabilities.
template <int kSoftcap, int kSinks, int kAlibi, int kDropout = 0>
struct ScoreMods {
  // Whether the code of a modifier is compiled in at all.
  static constexpr bool kMaySoftcap = kSoftcap != 0;
  static constexpr bool kMaySinks = kSinks != 0;
  static constexpr bool kMayAlibi = kAlibi != 0;
  static constexpr bool kMayDropout = kDropout != 0;
  // Whether it is on for these params (constant unless kAtRunTime).
  ATTUNE_DEVICE static bool softcap(const ScoreModParams& p) {
    return kSoftcap == kAtRunTime ? p.softcap > 0.0f : kSoftcap != 0;
  }
  ATTUNE_DEVICE static bool sinks(const ScoreModParams& p) {
    return kSinks == kAtRunTime ? p.sinks != nullptr : kSinks != 0;
  }
  ATTUNE_DEVICE static bool alibi(const ScoreModParams& p) {
    return kAlibi == kAtRunTime ? p.alibi_slopes != nullptr : kAlibi != 0;
  }
  // The host sets keep_scale (1 / (1 - p) >= 1) only when dropout is on.
  ATTUNE_DEVICE static bool dropout(const DropoutParams& d) {
    return kDropout == kAtRunTime ? d.keep_scale != 0.0f : kDropout != 0;
  }
};

using NoScoreMods = ScoreMods<0, 0, 0>;

// What a block's score step needs of the modifiers, in base 2 (the kernels'
// units): the softcap factors, and where the slopes and sinks of its rows'
// heads start (block row r belongs to head head0 + r % pack).
struct BlockScoreMods {
  bool softcap;
  bool sinks;
  bool alibi;
  float softcap_in;    // scale / c: raw score to the tanh argument
  float softcap_out;   // c log2(e): tanh back to a base-2 logit
  const float* slope;  // alibi_slopes of (batch, head0)
  const float* sink;   // sinks of head0
  float slope0_log2;   // head0's slope x log2(e), loaded once: every row's when a block holds one head
};

template <class Mods>
ATTUNE_DEVICE BlockScoreMods block_score_mods(const ScoreModParams& p, float scale_log2, i32 batch, i32 head0) {
  BlockScoreMods b{Mods::softcap(p), Mods::sinks(p), Mods::alibi(p), 0.0f, 0.0f, nullptr, nullptr, 0.0f};
  if (b.softcap) {
    b.softcap_in = scale_log2 / (p.softcap * kLog2e);
    b.softcap_out = p.softcap * kLog2e;
  }
  if (b.alibi) {
    b.slope = p.alibi_slopes + batch * p.alibi_batch_stride + head0;
    b.slope0_log2 = dev::load_global(b.slope) * kLog2e;
  }
  if (b.sinks) b.sink = p.sinks + head0;
  return b;
}

// The ALiBi bias's magnitude in log2 units: slope log2(e) x |distance|,
// distance = i + Sk - Sq - j (the key's offset from the row's diagonal).
// The kernels carry distances as floats (exact up to 2^24 keys): a per-row
// base less a compile-time offset per element, few registers.
ATTUNE_DEVICE float alibi_penalty(float slope_log2, float distance) {
  return slope_log2 * (distance < 0.0f ? -distance : distance);
}

// One raw score q.k as a base-2 logit: scaled (or softcapped), then the
// ALiBi bias -slope |distance| in log2 units (`slope_log2` = slope log2 e,
// `distance` = i + Sk - Sq - j). Softcap comes first (the contract's order).
template <class Mods>
ATTUNE_DEVICE float modified_logit(float raw, const BlockScoreMods& mods, float scale_log2, float slope_log2,
                                   float distance) {
  float x = raw * scale_log2;
  if constexpr (Mods::kMaySoftcap) {
    if (mods.softcap) x = dev::tanh_approx(raw * mods.softcap_in) * mods.softcap_out;
  }
  if constexpr (Mods::kMayAlibi) {
    if (mods.alibi) x -= alibi_penalty(slope_log2, distance);
  }
  return x;
}

// A block's dropout: whether it is on, the random stream of its (batch,
// head) (seed and offset read from device memory when the call passes them
// there), and 1 / (1 - p), which the forward applies once to each finished
// row and the backward to each kept element.
struct BlockDropout {
  bool on;
  DropoutStream stream;
  float scale;
};

template <class Mods>
ATTUNE_DEVICE BlockDropout block_dropout(const DropoutParams& d, i64 batch, i64 head, i64 heads) {
  BlockDropout b{Mods::dropout(d), {}, 1.0f};
  if (b.on) {
    const u64 seed = d.state != nullptr ? dev::load_global(d.state) : d.seed;
    const u64 offset = d.state != nullptr ? dev::load_global(d.state + 1) : d.offset;
    b.stream = DropoutStream::of(seed, offset, d.keep_below, batch, head, heads);
    b.scale = d.keep_scale;
  }
  return b;
}

// Zeroes the dropped probabilities of a thread's accumulator tiles (the
// mma.sync and wgmma layout: rows acc_row(lane, 0) and + 8 of each 16-row
// tile, two adjacent keys of each 8-key tile): one Philox call per tile,
// whose four words are exactly its four elements. `row0`, `key0`: the
// warp's first row and key, positions within the sequence (row0 a multiple
// of 16). The calls run one at a time (a rolled loop collecting keep bits,
// eight tiles to a word): unrolled, the scheduler interleaves their chains
// and their registers pile up (spills in flash_fwd_sm90).
template <int kMTiles, int kNTiles>
ATTUNE_DEVICE void drop_probabilities(float (&p)[kMTiles][kNTiles][4], const DropoutStream& stream, i64 row0,
                                      i64 key0) {
  constexpr int kWordTiles = 8;  // 4 bits per tile
  const i32 lane = dev::lane_id();
  const i64 first_key = key0 + frag::acc_col(lane, 0);
  ATTUNE_UNROLL
  for (int mt = 0; mt < kMTiles; ++mt) {
    const i64 row = row0 + mt * 16 + frag::acc_row(lane, 0);
    ATTUNE_UNROLL
    for (int nt0 = 0; nt0 < kNTiles; nt0 += kWordTiles) {
      const int tiles = kNTiles - nt0 < kWordTiles ? kNTiles - nt0 : kWordTiles;
      u32 bits = 0;
      ATTUNE_ROLLED
      for (int i = 0; i < tiles; ++i) {
        const philox::U32x4 w = stream.group(row, first_key + (nt0 + i) * 8);
        const u32 nibble = (stream.keeps_word(w.x[0]) ? 1u : 0u) | (stream.keeps_word(w.x[1]) ? 2u : 0u) |
                           (stream.keeps_word(w.x[2]) ? 4u : 0u) | (stream.keeps_word(w.x[3]) ? 8u : 0u);
        bits |= nibble << (4 * i);
      }
      ATTUNE_UNROLL
      for (int i = 0; i < tiles; ++i) {
        ATTUNE_UNROLL
        for (int w = 0; w < 4; ++w) {  // word w: row + 8 (w / 2), key + w % 2
          if (((bits >> (4 * i + w)) & 1u) == 0) p[mt][nt0 + i][w] = 0.0f;
        }
      }
    }
  }
}

}  // namespace attune
