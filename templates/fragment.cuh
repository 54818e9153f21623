// Where the elements of mma.sync.m16n8k16 fragments live, lane by lane, and
// which tile row each lane hands to ldmatrix (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type" and "ldmatrix"). Kernels take every
// fragment coordinate from here.
#pragma once

#include "templates/primitives/config.h"

namespace attune::frag {

// The fp32 accumulator (C, D) of one 16 x 8 tile: a lane holds 4 elements;
// element e sits at row acc_row(lane, e / 2) and column acc_col(lane, e).
// `half` 0 is rows 0-7, 1 rows 8-15; the two columns of a half are adjacent.
ATTUNE_DEVICE i32 acc_row(i32 lane, i32 half) { return lane / 4 + 8 * half; }
ATTUNE_DEVICE i32 acc_col(i32 lane, i32 e) { return 2 * (lane % 4) + e % 2; }
// The four lanes of a quad hold one row; its first lane stores the row's
// single values (m, l, LSE).
ATTUNE_DEVICE bool row_leader(i32 lane) { return lane % 4 == 0; }

// ldmatrix.x4 of a 16 x 16 tile stored row by row (the A operand, or two
// 16-row halves of B): lane supplies the address of row x4_row(lane),
// column x4_col(lane); matrices 0-3 are rows 0-7/8-15 x columns 0-7/8-15 in
// the order the fragment registers a0..a3 take them.
ATTUNE_DEVICE i32 x4_row(i32 lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
ATTUNE_DEVICE i32 x4_col(i32 lane) { return 8 * (lane / 16); }

// ldmatrix.x2 of an 8 x 16 tile (the B operand of S = Q K^T from K's rows):
// row x2_row(lane), column x2_col(lane). ldmatrix.x2.trans of a 16 x 8 tile
// (B from a row-major [k][n] tile such as V) uses rows x4_row(lane), column 0.
ATTUNE_DEVICE i32 x2_row(i32 lane) { return lane % 8; }
ATTUNE_DEVICE i32 x2_col(i32 lane) { return 8 * ((lane / 8) % 2); }

// ldmatrix.x4 of the B operands of two adjacent 8-column tiles (16 rows of
// a K-major tile such as K: matrices 0, 1 are the first tile's two 8-deep
// halves, 2, 3 the second's): row x4_b_row(lane), column x2_col(lane).
ATTUNE_DEVICE i32 x4_b_row(i32 lane) { return lane % 8 + 8 * (lane / 16); }

// ldmatrix.x4.trans of the B operands of two adjacent 8-column tiles of a
// row-major [k][n] tile such as V (matrices 0, 1: the first tile's k halves;
// 2, 3: the second's): k row x4_row(lane), column x4_col(lane).

// ldmatrix.x4.trans of the A operand from a tile stored transposed ([k][m],
// e.g. dS^T read as dS): k row x4t_row(lane), m column x4t_col(lane).
ATTUNE_DEVICE i32 x4t_row(i32 lane) { return 8 * (lane / 16) + lane % 8; }
ATTUNE_DEVICE i32 x4t_col(i32 lane) { return 8 * ((lane / 8) % 2); }

// A warp's fp32 accumulators of kRowTiles x kColTiles 16 x 8 tiles: the C
// and D of mma.sync, and a warp's share of a wgmma accumulator of
// kColTiles * 8 columns (kRowTiles 1). Element (half, e) of tile (rt, ct)
// sits at warp row row(lane, rt, half) and column col(lane, ct, e).
template <int kRowTiles, int kColTiles>
struct Accumulator {
  using Tile = float[4];
  float tiles[kRowTiles][kColTiles][4];

  ATTUNE_DEVICE float& at(int rt, int ct, int half, int e) { return tiles[rt][ct][2 * half + e]; }
  ATTUNE_DEVICE float at(int rt, int ct, int half, int e) const { return tiles[rt][ct][2 * half + e]; }
  ATTUNE_DEVICE Tile& tile(int rt, int ct) { return tiles[rt][ct]; }
  ATTUNE_DEVICE const Tile& tile(int rt, int ct) const { return tiles[rt][ct]; }
  ATTUNE_DEVICE static i32 row(i32 lane, int rt, int half) { return rt * 16 + acc_row(lane, half); }
  ATTUNE_DEVICE static i32 col(i32 lane, int ct, int e) { return ct * 8 + acc_col(lane, e); }

  // Every element set (unrolled, so the tiles stay in registers).
  ATTUNE_DEVICE void fill(float value) {
    ATTUNE_UNROLL
    for (int rt = 0; rt < kRowTiles; ++rt) {
      ATTUNE_UNROLL
      for (int ct = 0; ct < kColTiles; ++ct) {
        ATTUNE_UNROLL
        for (int i = 0; i < 4; ++i) tiles[rt][ct][i] = value;
      }
    }
  }
};

}  // namespace attune::frag
