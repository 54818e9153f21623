// The shared tile layout (templates/smem_layout.cuh) for every tile shape
// the kernels use: offset() is a permutation of the tile, chunk_coord() is
// its inverse on chunk starts, and LaneOffsets::at() equals offset() for
// every access pattern its contract admits (the kernels' own patterns:
// columns below 16 stepped by 16 across the tile, and power-of-two warp
// column blocks stepped within the block). A step outside the contract is
// refused by the emulator build, so a kernel that takes one fails its tests.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "templates/smem_layout.cuh"

namespace attune {
namespace {

template <int kRows, int kCols, int kNarrow>
void expect_permutation() {
  using Tile = SmemTile<kRows, kCols, kNarrow>;
  std::vector<int> hits(Tile::kElems, 0);
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const int at = Tile::offset(r, c);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, Tile::kElems);
      ++hits[at];
    }
  }
  for (int i = 0; i < Tile::kElems; ++i) ASSERT_EQ(hits[i], 1) << kRows << "x" << kCols << " element " << i;
  for (int i = 0; i < Tile::kChunks; ++i) {
    const auto coord = Tile::chunk_coord(i);
    ASSERT_EQ(Tile::offset(coord.row, coord.col), i * 8) << kRows << "x" << kCols << " chunk " << i;
  }
}

// Every lane whose column is `base` (a multiple of `block`) plus a part
// below `part`, stepped by dc (multiples of `step` below `reach`) and dr
// (multiples of 8 below kRows - row).
template <int kRows, int kCols, int kNarrow>
void expect_lane_steps(int block, int part, int step, int reach) {
  using Tile = SmemTile<kRows, kCols, kNarrow>;
  for (int base = 0; base + block <= kCols; base += block) {
    for (int row = 0; row < 16 && row < kRows; ++row) {
      for (int p = 0; p < part; ++p) {
        const auto lane = Tile::lane(row, base + p);
        for (int dr = 0; row + dr < kRows; dr += 8) {
          for (int dc = 0; dc < reach && base + p + dc < kCols; dc += step) {
            ASSERT_EQ(lane.at(dr, dc), Tile::offset(row + dr, base + p + dc))
                << kRows << "x" << kCols << " row " << row << "+" << dr << " col " << base + p << "+" << dc;
          }
        }
      }
    }
  }
}

template <int kRows, int kCols, int kNarrow>
void expect_shape() {
  using Tile = SmemTile<kRows, kCols, kNarrow>;
  expect_permutation<kRows, kCols, kNarrow>();
  // A lane's 16-column fragment stepped across the whole tile (Q, K, V reads).
  expect_lane_steps<kRows, kCols, kNarrow>(kCols, 16, 16, kCols);
  // Warp blocks of columns the layout admits (powers of two; any multiple of
  // 16 with 16-column panels), a lane part below 8, stepped by 8 within the
  // block (P^T stores, the backward's transposed reads).
  for (int block = 8; block <= kCols; block += 8) {
    if (kCols % block == 0 && Tile::xor_steps_within(block)) {
      expect_lane_steps<kRows, kCols, kNarrow>(block, 8, 8, block);
    }
  }
}

template <int kNarrow, int... kCols>
void expect_rows(std::integer_sequence<int, kCols...> /*cols*/) {
  (expect_shape<16, kCols, kNarrow>(), ...);
  (expect_shape<32, kCols, kNarrow>(), ...);
  (expect_shape<64, kCols, kNarrow>(), ...);
  (expect_shape<128, kCols, kNarrow>(), ...);
}

TEST(SmemLayoutTest, EveryShapeIsAPermutationAndEveryAdmittedStepIsExact) {
  using Widths = std::integer_sequence<int, 16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256>;
  expect_rows<32>(Widths{});  // the forward's tiles
  expect_rows<16>(Widths{});  // the backward's
}

TEST(SmemLayoutTest, AStepWhoseChunkBitsOverlapTheLanesIsRefused) {
  using Tile = SmemTile<64, 64>;
  const auto lane = Tile::lane(3, 8);  // chunk 1
  if (kSwizzleTiles) {
    // Chunk 1 + 1 is chunk 2, not 1 ^ 1: the XOR form would land in chunk 0.
    EXPECT_THROW(static_cast<void>(lane.at(0, 8)), std::logic_error);
  }
  EXPECT_EQ(lane.at(8, 16), Tile::offset(11, 24));
}

TEST(SmemLayoutTest, PanelsAreTheWidestOf64_32_16ThatDividesTheTile) {
  // One panel width per tile keeps a lane's offset one register.
  EXPECT_EQ((SmemTile<16, 64>::kPanel), 64);
  EXPECT_EQ((SmemTile<16, 256>::kPanel), 64);
  EXPECT_EQ((SmemTile<16, 96>::kPanel), 32);
  EXPECT_EQ((SmemTile<16, 160>::kPanel), 32);
  EXPECT_EQ((SmemTile<16, 224>::kPanel), 32);
  EXPECT_EQ((SmemTile<16, 48>::kPanel), 16);
  // A 32-column warp block of a d96 tile is one panel; 48 is not a power of two.
  EXPECT_TRUE((SmemTile<16, 96>::xor_steps_within(32)));
  EXPECT_FALSE((SmemTile<16, 96>::xor_steps_within(48)));
  EXPECT_EQ((SmemTile<16, 96>::lane(3, 64).at(8, 16)), (SmemTile<16, 96>::offset(11, 80)));
  // The backward's 16-column panels: a 48-column block steps by XOR too.
  EXPECT_EQ((SmemTile<16, 96, 16>::kPanel), 16);
  EXPECT_TRUE((SmemTile<16, 96, 16>::xor_steps_within(48)));
  EXPECT_EQ((SmemTile<16, 96, 16>::lane(5, 48).at(8, 40)), (SmemTile<16, 96, 16>::offset(13, 88)));
}

TEST(SmemLayoutTest, EightRowsOfAChunkSitInEightBankGroups) {
  // The swizzle's point: an ldmatrix 8 x 8 matrix (8 rows, one 16-byte
  // chunk each) touches each group of four banks once.
  using Tile = SmemTile<64, 128>;
  for (int row0 = 0; row0 < 64; row0 += 8) {
    for (int col = 0; col < 128; col += 8) {
      unsigned groups = 0;
      for (int r = 0; r < 8; ++r) groups |= 1u << ((Tile::offset(row0 + r, col) * 2 / 16) % 8);
      EXPECT_EQ(groups, 0xffu) << "rows " << row0 << "-" << row0 + 7 << " col " << col;
    }
  }
}

}  // namespace
}  // namespace attune
