// Where a sequence's query rows and keys are, and which key tiles a block of
// its rows sees: the one lookup every kernel makes (dense batches, packed
// cu_seqlens, padded seqlens_k), by global position within the sequence.
#pragma once

#include "templates/mask.h"
#include "templates/primitives/primitives.h"

namespace attune {

// A sequence's key count read from device memory (seqlens_k, a cache's
// lengths), cut to the `capacity` keys it owns (its block-table row, Sk, or
// its packed keys): a longer one would read past them. A cut is reported
// (bounds_report.h).
ATTUNE_DEVICE i64 clamp_key_length(i64 length, i64 capacity, i32 batch) {
  if (length >= 0 && length <= capacity) return length;
  dev::report_bounds(kBoundsLength, batch, -1, static_cast<i32>(length), static_cast<i32>(capacity));
  return length < 0 ? 0 : capacity;
}
// The cut past the capacity alone, without the report, for a kernel whose
// register budget has no room for more (the backward: its forward reports
// the same lengths; a negative length leaves it no key tile to read).
// (In 32 bits: the 64-bit form spills 12 bytes in flash_bwd d192 on sm_80.)
ATTUNE_DEVICE i32 clamp_key_length_quietly(i32 length, i32 capacity) { return length < capacity ? length : capacity; }

// How a kernel finds its sequences: packed offsets (cu_seqlens, B + 1
// entries; null: every sequence has the full length at its batch index) and
// per-sequence key counts (seqlens_k; null: all its keys).
struct SequenceArrays {
  const i32* cu_seqlens_q;
  const i32* cu_seqlens_k;
  const i32* seqlens_k;
  i64 seqlen_q;  // rows of a dense sequence
  i64 seqlen_k;  // keys of a dense sequence
};

// Whether a key count cut to the capacity is reported (kReport) or cut
// quietly in 32 bits (the backward, as clamp_key_length_quietly says).
enum class LengthCut { kReport, kQuiet };

struct Sequence {
  i64 q_begin;     // first global row of Q, O, LSE (packed), else 0
  i64 q_len;       // its query rows
  i64 k_begin;     // first global row of K, V (packed), else 0
  i64 k_len;       // keys that exist (padding cut)
  i64 k_capacity;  // key rows the sequence owns in K and V
};

template <LengthCut kCut = LengthCut::kReport>
ATTUNE_DEVICE Sequence sequence_of(const SequenceArrays& a, i32 batch) {
  Sequence s{0, a.seqlen_q, 0, a.seqlen_k, a.seqlen_k};
  if (a.cu_seqlens_q != nullptr) {
    s.q_begin = dev::load_global(a.cu_seqlens_q + batch);
    s.q_len = dev::load_global(a.cu_seqlens_q + batch + 1) - s.q_begin;
  }
  if (a.cu_seqlens_k != nullptr) {
    s.k_begin = dev::load_global(a.cu_seqlens_k + batch);
    s.k_capacity = dev::load_global(a.cu_seqlens_k + batch + 1) - s.k_begin;
    s.k_len = s.k_capacity;
  }
  if (a.seqlens_k != nullptr) {
    if constexpr (kCut == LengthCut::kReport) {
      s.k_len = clamp_key_length(dev::load_global(a.seqlens_k + batch), s.k_len, batch);
    } else {
      s.k_len = clamp_key_length_quietly(dev::load_global(a.seqlens_k + batch), static_cast<i32>(s.k_capacity));
    }
  }
  return s;
}

// The last row of a block of `rows` rows from row0 that lies in a sequence
// of `len` rows (row0 < len). (rows - 1) first: row0 + 63 keeps a fact
// about overflow that (row0 + 64) - 1 loses, and with it flash_fwd_sm90's
// consumer is 88 instructions shorter at d128.
ATTUNE_DEVICE i64 last_row_of(i64 row0, i64 rows, i64 len) {
  const i64 last = row0 + (rows - 1);
  return last < len - 1 ? last : len - 1;
}

// The keys a block of consecutive rows sees: the visible keys of its first
// and last rows (both bounds are non-decreasing in the row), so the block
// sees [first.begin, last.end).
struct RowBlockKeys {
  KeyBounds first;
  KeyBounds last;
  // Every row of the block sees every key of [key0, key0 + block_n): the
  // tile needs no mask.
  ATTUNE_DEVICE bool sees_all(i64 key0, i64 block_n) const { return key0 >= last.begin && key0 + block_n <= first.end; }
  // The key tiles of kBlockN keys [free_tile_begin, free_tile_end) every row
  // of the block sees whole (sees_all); the range may be empty.
  template <int kBlockN>
  ATTUNE_DEVICE i64 free_tile_begin() const {
    return (last.begin + kBlockN - 1) / kBlockN;
  }
  template <int kBlockN>
  ATTUNE_DEVICE i64 free_tile_end() const {
    return first.end / kBlockN;
  }
  // The key tiles of kBlockN keys [tile_begin, tile_end) some row sees.
  template <int kBlockN>
  ATTUNE_DEVICE i64 tile_begin() const {
    return first.begin / kBlockN;
  }
  template <int kBlockN>
  ATTUNE_DEVICE i64 tile_end() const {
    return last.end > first.begin ? (last.end + kBlockN - 1) / kBlockN : first.begin / kBlockN;
  }
};

ATTUNE_DEVICE RowBlockKeys row_block_keys(const MaskParams& mask, i64 first_row, i64 last_row, i64 q_len, i64 k_len) {
  return {key_bounds(mask, first_row, q_len, k_len), key_bounds(mask, last_row, q_len, k_len)};
}

// Floor and ceiling of a / b for b > 0 and any a.
ATTUNE_HOST_DEVICE constexpr i64 floor_div(i64 a, i64 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
ATTUNE_HOST_DEVICE constexpr i64 ceil_div(i64 a, i64 b) { return -floor_div(-a, b); }

// The query tiles [begin, end) of a sequence in which some row may see a key
// of [key0, key0 + kBlockN) (the backward's loop, over queries for a block
// of keys). Bounds are non-decreasing in the row, so the tiles form one range
// and include every tile with such a row.
struct TileRange {
  i64 begin;
  i64 end;
};

template <int kBlockM, int kBlockN>
ATTUNE_DEVICE TileRange query_tiles(const MaskParams& mask, i64 key0, i64 q_len, i64 k_len) {
  // In closed form (once per key block; a walk over every tile cost the
  // Hopper backward 8 to 17% of its instructions). Tile m sees the block
  // when its first row's begin bound is below key0 + kBlockN and below the
  // keys' end (its rows see some key), and its last row's end bound is past
  // key0. Tested against the walk over every tile. Selects, not early
  // returns: flash_bwd at d224 on sm_90a runs at 253 registers, and the
  // branches cost it 12 bytes of spills (NVRTC).
  const i64 tiles = (q_len + kBlockM - 1) / kBlockM;
  const i64 offset = diagonal_offset(mask, q_len, k_len);
  i64 begin = 0;
  i64 end = tiles;
  if (mask.left >= 0) {  // kBlockM m + offset - left < min(key0 + kBlockN, k_len)
    const i64 keys_end = key0 + kBlockN < k_len ? key0 + kBlockN : k_len;
    const i64 below = ceil_div(keys_end + mask.left - offset, kBlockM);
    end = below < end ? below : end;
  }
  if (mask.right >= 0) {  // min(kBlockM m + kBlockM - 1, q_len - 1) + offset + right + 1 > key0
    const i64 last_unseen = key0 - offset - mask.right - 1;
    begin = q_len - 1 <= last_unseen ? tiles : floor_div(last_unseen - (kBlockM - 1), kBlockM) + 1;
    begin = begin < 0 ? 0 : begin;
  }
  const bool none = k_len <= key0 || end <= begin;
  return {none ? tiles : begin, none ? tiles : end};
}

// The query tiles whose every row sees every key of [key0, key0 + kBlockN)
// (RowBlockKeys::sees_all): the backward's steps that need no mask. A row's
// bounds are non-decreasing in the row, so they form one range, from the
// first tile whose first row's end bound reaches key0 + kBlockN to the last
// whose last row's begin bound is at most key0; empty when the keys run
// past the sequence. In closed form: the step loop asks it once per block.
template <int kBlockM, int kBlockN>
ATTUNE_DEVICE TileRange free_query_tiles(const MaskParams& mask, i64 key0, i64 q_len, i64 k_len) {
  const i64 tiles = (q_len + kBlockM - 1) / kBlockM;
  if (key0 + kBlockN > k_len || tiles <= 0) return {0, 0};
  const i64 offset = diagonal_offset(mask, q_len, k_len);
  i64 begin = 0;
  if (mask.right >= 0) {  // row kBlockM m: row + offset + right + 1 >= key0 + kBlockN
    begin = ceil_div(key0 + kBlockN - 1 - mask.right - offset, kBlockM);
    begin = begin < 0 ? 0 : begin > tiles ? tiles : begin;
  }
  i64 end = tiles;
  const i64 last_row = key0 + mask.left - offset;  // the last row whose begin bound is at most key0
  if (mask.left >= 0 && q_len - 1 > last_row) {    // row kBlockM m + kBlockM - 1 <= last_row
    end = floor_div(last_row - (kBlockM - 1), kBlockM) + 1;
    end = end < 0 ? 0 : end > tiles ? tiles : end;
  }
  return {begin, end > begin ? end : begin};
}

// Of the key blocks (kBlockN keys) after `key_block`, below `key_blocks`,
// how many hold query tile `tile` in their query_tiles, for a key block
// that holds it (every step's does): the key tiles some row of the tile
// sees form one range (bounds non-decreasing in the row) holding
// key_block, and a key block's query tiles are exactly the tiles that see
// it, so the count runs from key_block + 1 to the range's end, which the
// tile's last row's end bound gives.
template <int kBlockM, int kBlockN>
ATTUNE_DEVICE i64 later_key_blocks_seen(const MaskParams& mask, i64 tile, i64 key_block, i64 key_blocks, i64 q_len,
                                        i64 k_len) {
  const i64 last_end = key_bounds(mask, last_row_of(tile * kBlockM, kBlockM, q_len), q_len, k_len).end;
  const i64 end = ceil_div(last_end, kBlockN);
  const i64 to = end < key_blocks ? end : key_blocks;
  return to > key_block + 1 ? to - (key_block + 1) : 0;
}

}  // namespace attune
