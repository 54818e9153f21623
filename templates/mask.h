// Which keys a query row sees: one function of global positions within a
// sequence, used by the kernels and (through core/) by the host.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

// Every mask of the contract as a band around a diagonal:
//   diagonal d = row + (top_left ? 0 : seqlen_k - seqlen_q)
//   visible keys: j >= d - left (if left >= 0) and j <= d + right (if right >= 0)
// none = (-1, -1); causal bottom-right = (-1, 0); causal top-left = (-1, 0,
// top_left); sliding window (left, right) in the bottom-right frame.
struct MaskParams {
  i32 left = -1;
  i32 right = -1;
  i32 top_left = 0;
};

// Visible keys [begin, end) of one row; empty when end <= begin. Both bounds
// are non-decreasing in the row, so a block of rows sees at most
// [begin(first row), end(last row)).
struct KeyBounds {
  i64 begin;
  i64 end;
};

// diagonal(row) - row: the same for every row of a sequence.
ATTUNE_DEVICE i64 diagonal_offset(const MaskParams& mask, i64 seqlen_q, i64 seqlen_k) {
  return mask.top_left != 0 ? 0 : seqlen_k - seqlen_q;
}

ATTUNE_DEVICE KeyBounds key_bounds(const MaskParams& mask, i64 row, i64 seqlen_q, i64 seqlen_k) {
  const i64 diagonal = row + diagonal_offset(mask, seqlen_q, seqlen_k);
  KeyBounds b{0, seqlen_k};
  if (mask.left >= 0 && diagonal - mask.left > 0) b.begin = diagonal - mask.left;
  if (mask.right >= 0 && diagonal + mask.right + 1 < seqlen_k) b.end = diagonal + mask.right + 1;
  return b;
}

// A row's keys [begin, end) relative to `base` and clamped to [0, width]:
// the per-element tests of a masked tile then compare 32-bit offsets.
struct KeyWindow {
  i32 begin;
  i32 end;
};

ATTUNE_DEVICE KeyWindow key_window(const KeyBounds& b, i64 base, i32 width) {
  const i64 begin = b.begin - base;
  const i64 end = b.end - base;
  const i32 lo = static_cast<i32>(begin < 0 ? 0 : begin > width ? width : begin);
  return {lo, static_cast<i32>(end < lo ? lo : end > width ? width : end)};
}

}  // namespace attune
