// Where element (row, col) of a tile of 16-bit elements lives in shared
// memory: one layout used by the loaders and by every ldmatrix consumer, so
// it changes in one place.
//
// Swizzled (the default): the tile is stored as column panels of 64
// elements (128 bytes: the 32 banks once), the last panel 32 or 16 wide when
// the tile is; a panel holds its rows one after another, and within a row
// the 16-byte chunk c is stored at chunk c ^ f(row), f(row) = (row / (8 /
// chunks)) mod chunks for a panel of `chunks` chunks. Any 8 consecutive rows
// then put a given chunk in 8 different bank groups, so each 8 x 8 matrix of
// an ldmatrix is one wavefront, and so is every quarter-warp of a loader that
// fills the tile in storage order (chunk_coord). (The 128-byte panels with
// chunk ^ (row % 8) are also the layout Hopper's TMA SWIZZLE_128B writes.)
// Unswizzled: rows of kCols elements one after another; rows of 64 or more
// elements put the 8 rows of a matrix in the same banks (8 wavefronts).
#pragma once

#include "templates/primitives/config.h"

namespace attune {

inline constexpr bool kSwizzleTiles = true;

// A kRows x kCols tile (kCols a multiple of 16, its last panel 16, 32 or 64 wide).
template <int kRows, int kCols>
struct SmemTile {
  static_assert(kCols % 16 == 0 && kCols % 64 != 48, "SmemTile: panels are 16, 32 or 64 columns wide");
  static constexpr int kElems = kRows * kCols;
  static constexpr int kChunks = kElems / 8;  // 16-byte chunks

  static constexpr int kPanel = 64;                // columns of a full panel
  static constexpr int kFullPanels = kCols / kPanel;
  static constexpr int kLastWidth = kCols - kFullPanels * kPanel;  // 0: none

  // The chunk (0..chunks-1) a logical chunk is stored at in its row.
  ATTUNE_HOST_DEVICE static constexpr i32 swizzle(i32 chunk, i32 row, i32 chunks) {
    return chunk ^ ((row / (8 / chunks)) % chunks);
  }

  ATTUNE_HOST_DEVICE static constexpr i32 offset(i32 row, i32 col) {
    if constexpr (!kSwizzleTiles) {
      return row * kCols + col;
    } else {
      const i32 panel = col / kPanel;
      const i32 width = panel < kFullPanels ? kPanel : kLastWidth;
      const i32 within = col % kPanel;
      return panel * kRows * kPanel + row * width + swizzle(within / 8, row, width / 8) * 8 + within % 8;
    }
  }

  // The row and column of the element that starts storage chunk i (i in
  // 0..kChunks-1): a loader whose thread t fills chunk t writes consecutive
  // bytes from consecutive threads, so its writes never conflict.
  struct Coord {
    i32 row;
    i32 col;
  };
  ATTUNE_HOST_DEVICE static constexpr Coord chunk_coord(i32 i) {
    if constexpr (!kSwizzleTiles) {
      return {i / (kCols / 8), (i % (kCols / 8)) * 8};
    } else {
      const i32 element = i * 8;
      const i32 full = kFullPanels * kRows * kPanel;
      const i32 panel = element < full ? element / (kRows * kPanel) : kFullPanels;
      const i32 width = panel < kFullPanels ? kPanel : kLastWidth;
      const i32 within = element < full ? element % (kRows * kPanel) : element - full;
      const i32 row = within / width;
      const i32 stored = (within % width) / 8;
      return {row, panel * kPanel + swizzle(stored, row, width / 8) * 8};  // the XOR is its own inverse
    }
  }
};

}  // namespace attune
