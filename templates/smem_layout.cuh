// Where element (row, col) of a tile of 16-bit elements lives in shared
// memory: one layout used by the loaders and by every ldmatrix consumer, so
// it changes in one place.
//
// Swizzled (the default): the tile is stored as column panels of 64
// elements (128 bytes: the 32 banks once), or of 32 or 16 when 64 does not
// divide the tile's width (d96, d160 and d224 use 32: every panel of a tile
// has one width, so a lane's offset is one register; the backward uses 16);
// a panel holds its rows
// one after another, and within a row the 16-byte chunk c is stored at chunk
// c ^ f(row), f(row) = (row / (8 / chunks)) mod chunks for a panel of
// `chunks` chunks. Any 8 consecutive rows then put a given chunk in 8
// different bank groups, so each 8 x 8 matrix of an ldmatrix is one
// wavefront, and so is every quarter-warp of a loader that fills the tile in
// storage order (chunk_coord). (128- and 64-byte panels with this XOR are
// also the layouts Hopper's TMA SWIZZLE_128B and SWIZZLE_64B write.)
// Unswizzled: rows of kCols elements one after another; rows of 64 or more
// elements put the 8 rows of a matrix in the same banks (8 wavefronts).
#pragma once

#include "templates/primitives/config.h"

#if defined(ATTUNE_EMULATOR)
#include <stdexcept>
#include <string>
#endif

namespace attune {

inline constexpr bool kSwizzleTiles = true;

// A kRows x kCols tile (kCols a multiple of 16). kNarrowPanel: the panel
// width where 64 does not divide kCols (32 or 16; 16 if 32 does not divide
// either). The forward kernels use 32; the backward 16, which lets its
// warps' column blocks of any multiple of 16 (d96 split in 48s) step by XOR.
template <int kRows, int kCols, int kNarrowPanel = 32>
struct SmemTile {
  static_assert(kCols % 16 == 0, "SmemTile: tiles are whole 16-column fragments wide");
  static constexpr int kElems = kRows * kCols;
  static constexpr int kChunks = kElems / 8;  // 16-byte chunks

  static_assert(kNarrowPanel == 32 || kNarrowPanel == 16, "SmemTile: narrow panels are 32 or 16 columns");
  // Columns of a panel: 64 (128 bytes) where it divides the tile, else narrower.
  static constexpr int kPanel = kCols % 64 == 0 ? 64 : kCols % kNarrowPanel == 0 ? kNarrowPanel : 16;
  static constexpr int kPanelChunks = kPanel / 8;

  // The chunk (0..kPanelChunks-1) a logical chunk is stored at in its row;
  // depends on row % 8 only.
  ATTUNE_HOST_DEVICE static constexpr i32 swizzle(i32 chunk, i32 row) {
    return chunk ^ ((row / (8 / kPanelChunks)) % kPanelChunks);
  }

  ATTUNE_HOST_DEVICE static constexpr i32 offset(i32 row, i32 col) {
    if constexpr (!kSwizzleTiles) {
      return row * kCols + col;
    } else {
      const i32 within = col % kPanel;
      return (col / kPanel) * kRows * kPanel + row * kPanel + swizzle(within / 8, row) * 8 + within % 8;
    }
  }

  // A lane's accesses of an unrolled loop, at (row + dr, col + dc) for
  // compile-time dr (a multiple of 8) and dc (a multiple of 8): the swizzle
  // of those rows is the lane's (it depends on row % 8 only), and when the
  // chunk bits of col % kPanel and of dc % kPanel are disjoint, a column step
  // flips chunk bits the lane's column leaves clear. Each access is then one
  // XOR with a constant and an immediate offset, not a fresh address
  // computation (which costs registers in every unrolled ldmatrix or store).
  // The emulator checks every access against offset().
  struct LaneOffsets {
    i32 full;  // the lane's offset
#if defined(ATTUNE_EMULATOR)
    i32 row;
    i32 col;
#endif
    ATTUNE_HOST_DEVICE constexpr i32 at(i32 dr, i32 dc) const {
      i32 result = 0;
      if constexpr (!kSwizzleTiles) {
        result = full + dr * kCols + dc;
      } else {
        const i32 flip = ((dc % kPanel) / 8) << 3;  // chunk bits of the element offset
        result = (full ^ flip) + (dc / kPanel) * kRows * kPanel + dr * kPanel;
      }
#if defined(ATTUNE_EMULATOR)
      if (result != offset(row + dr, col + dc)) {
        throw std::logic_error("SmemTile::LaneOffsets::at: a step the XOR form cannot take (row " +
                               std::to_string(row) + " + " + std::to_string(dr) + ", col " + std::to_string(col) +
                               " + " + std::to_string(dc) + ")");
      }
#endif
      return result;
    }
  };
  // Whether lanes of a warp whose columns are a block of `block` columns
  // (starting at a multiple of it, the lane's part below 8) may step by XOR
  // within the block: when the block is the whole tile, a power of two (then
  // it divides a panel or a panel divides it, and a step's chunk bits are
  // above the lane's), or a multiple of 16-column panels.
  ATTUNE_HOST_DEVICE static constexpr bool xor_steps_within(int block) {
    return block >= kCols || (block >= 8 && (block & (block - 1)) == 0) || (kPanel == 16 && block % 16 == 0);
  }
  ATTUNE_HOST_DEVICE static constexpr LaneOffsets lane(i32 row, i32 col) {
    LaneOffsets l{};
    l.full = offset(row, col);
#if defined(ATTUNE_EMULATOR)
    l.row = row;
    l.col = col;
#endif
    return l;
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
      const i32 panel = element / (kRows * kPanel);
      const i32 within = element % (kRows * kPanel);
      const i32 row = within / kPanel;
      return {row, panel * kPanel + swizzle((within % kPanel) / 8, row) * 8};  // the XOR is its own inverse
    }
  }
};

}  // namespace attune
