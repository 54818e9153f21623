// Where element (row, col) of a tile of 16-bit elements lives in shared
// memory: one function used by the loaders and by every ldmatrix consumer, so
// the layout changes in one place.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

// A kRows x kCols tile (kCols a multiple of 16), stored row by row with a
// pitch of kCols elements.
template <int kRows, int kCols>
struct SmemTile {
  static_assert(kCols % 16 == 0, "SmemTile: columns come in 16-byte chunks, two per 16 columns");
  static constexpr int kElems = kRows * kCols;
  ATTUNE_HOST_DEVICE static constexpr i32 offset(i32 row, i32 col) { return row * kCols + col; }
};

}  // namespace attune
