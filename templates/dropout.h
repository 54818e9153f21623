// Attention dropout's keep decision: one function of the call's (seed,
// offset) and an element's global position (batch, query head, query row
// and key within the sequence), shared by the kernels, the emulator and
// (through reference/) the fp64 host reference, so all of them keep the same
// elements whatever their tiles, warps, splits or schedules.
//
// The random bits come from Philox-4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011), the counter-based generator
// PyTorch and flash-attn use: a pure function of a 128-bit counter and a
// 64-bit key, so the backward regenerates the forward's mask and nothing is
// stored.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

// The dropout state of one call, as the kernels take it (a compile-time
// feature, `kDropout`: variants without it never read this).
struct DropoutParams {
  u64 seed;
  u64 offset;
  const u64* state;  // {seed, offset} in device memory, read at launch in place of the two above; null: them
  u32 keep_below;    // an element is kept iff its 32 random bits are below this: (1 - p) 2^32
  float keep_scale;  // 1 / (1 - p): what a kept probability is multiplied by
};

namespace philox {

inline constexpr u32 kMul0 = 0xD2511F53u;
inline constexpr u32 kMul1 = 0xCD9E8D57u;
inline constexpr u32 kWeyl0 = 0x9E3779B9u;
inline constexpr u32 kWeyl1 = 0xBB67AE85u;

struct U32x4 {
  u32 x[4];
};

// One multiplication's 64-bit product split in halves (IMAD.WIDE.U32 on the
// GPU, the same arithmetic on the host).
ATTUNE_HOST_DEVICE inline void mul_hi_lo(u32 a, u32 b, u32& hi, u32& lo) {
  const u64 product = static_cast<u64>(a) * static_cast<u64>(b);
  hi = static_cast<u32>(product >> 32);
  lo = static_cast<u32>(product);
}

// Philox-4x32 with ten rounds: the four 32-bit words of counter c under key k.
ATTUNE_HOST_DEVICE inline U32x4 philox4x32_10(U32x4 c, u32 k0, u32 k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    u32 hi0 = 0;
    u32 lo0 = 0;
    u32 hi1 = 0;
    u32 lo1 = 0;
    mul_hi_lo(kMul0, c.x[0], hi0, lo0);
    mul_hi_lo(kMul1, c.x[2], hi1, lo1);
    c = U32x4{{hi1 ^ c.x[1] ^ k0, lo1, hi0 ^ c.x[3] ^ k1, lo0}};
  }
  return c;
}

}  // namespace philox

// The element layout of the random words: one Philox call serves the four
// elements (row i, i + 8) x (key j, j + 1) for i with (i mod 16) < 8 and j
// even, which is exactly what one thread holds of an mma.sync or wgmma
// accumulator tile (rows r and r + 8, two adjacent columns), so the forward
// kernels draw one call per four scores. The counter is
//   (j / 2, (i / 16) 8 + i mod 8, batch Hq + head, offset mod 2^32)
// and the key (seed mod 2^32, (seed / 2^32) xor (offset / 2^32)); the word
// of (i, j) is 2 ((i / 8) mod 2) + j mod 2. Rows and keys are positions
// within the sequence.
struct DropoutStream {
  u32 key0;
  u32 key1;
  u32 head_word;    // counter word 2: batch Hq + head
  u32 offset_word;  // counter word 3
  u32 keep_below;

  // The stream of (batch, head) under a call's seed and offset (`heads`: Hq).
  ATTUNE_HOST_DEVICE static DropoutStream of(u64 seed, u64 offset, u32 keep_below, i64 batch, i64 head, i64 heads) {
    return DropoutStream{static_cast<u32>(seed), static_cast<u32>(seed >> 32) ^ static_cast<u32>(offset >> 32),
                         static_cast<u32>(batch * heads + head), static_cast<u32>(offset), keep_below};
  }
  // Counter word 1 of row i.
  ATTUNE_HOST_DEVICE static u32 row_word(i64 row) { return static_cast<u32>(((row >> 4) << 3) | (row & 7)); }
  // The four words of the group holding (row, key).
  ATTUNE_HOST_DEVICE philox::U32x4 group(i64 row, i64 key) const {
    return philox::philox4x32_10(philox::U32x4{{static_cast<u32>(key >> 1), row_word(row), head_word, offset_word}},
                                 key0, key1);
  }
  // Which of the group's words belongs to (row, key).
  ATTUNE_HOST_DEVICE static int word_of(i64 row, i64 key) { return static_cast<int>(((row >> 3) & 1) * 2 + (key & 1)); }
  ATTUNE_HOST_DEVICE bool keeps_word(u32 word) const { return word < keep_below; }
  // (Selects, not an index: a variable index into the words would put them
  // in local memory on the GPU.)
  ATTUNE_HOST_DEVICE bool keeps(i64 row, i64 key) const {
    const philox::U32x4 g = group(row, key);
    const bool odd = (key & 1) != 0;
    return keeps_word(((row >> 3) & 1) != 0 ? (odd ? g.x[3] : g.x[2]) : (odd ? g.x[1] : g.x[0]));
  }
};

// Whether element (row, key) of (batch, head) is kept: the one definition the
// kernels and the reference share (`heads`: Hq).
ATTUNE_HOST_DEVICE inline bool dropout_keeps(const DropoutParams& d, i64 batch, i64 head, i64 heads, i64 row, i64 key) {
  return DropoutStream::of(d.seed, d.offset, d.keep_below, batch, head, heads).keeps(row, key);
}

// The params of drop probability p (0 <= p < 1) under (seed, offset):
// keep_below = floor((1 - p) 2^32), at most 2^32 - 1.
ATTUNE_HOST_DEVICE inline DropoutParams dropout_params(double p, u64 seed, u64 offset) {
  const double keep = (1.0 - p) * 4294967296.0;
  const u32 below = keep >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<u32>(keep);
  return DropoutParams{seed, offset, nullptr, below, static_cast<float>(1.0 / (1.0 - p))};
}

}  // namespace attune
