// Hopper's operand layouts (templates/primitives/hopper_layout.h) against
// what the PTX ISA states: the swizzle patterns chunk by chunk, the matrix
// descriptor's bit fields, the canonical layouts a descriptor describes, and
// the register fragments of wgmma's accumulator and A operand.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <utility>

#include "templates/primitives/hopper_layout.h"

namespace attune::sm90 {
namespace {

// The chunk (16 bytes) that logical chunk c of row r (rows of the span)
// lands in, per the ISA's swizzle figures: 128B swizzle stores row r's
// chunk c at c ^ (r % 8); 64B at c ^ ((r / 2) % 4) over rows of 64 bytes
// (a 128-byte line holds two rows); 32B at c ^ ((r / 4) % 2).
int expected_chunk(Swizzle s, int row, int chunk) {
  switch (s) {
    case Swizzle::k128B:
      return chunk ^ (row % 8);
    case Swizzle::k64B:
      return chunk ^ ((row / 2) % 4);
    case Swizzle::k32B:
      return chunk ^ ((row / 4) % 2);
    case Swizzle::kNone:
      return chunk;
  }
  return -1;
}

TEST(HopperLayoutTest, SwizzlesMoveWholeChunksWithinTheirRowAsTheIsaDraws) {
  for (Swizzle s : {Swizzle::kNone, Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
    const int span = swizzle_span(s);
    const int atom = swizzle_atom_bytes(s);
    for (int row = 0; row < 16; ++row) {
      for (int chunk = 0; chunk < span / 16; ++chunk) {
        for (int byte = 0; byte < 16; byte += 5) {
          const u32 logical = static_cast<u32>(row * span + chunk * 16 + byte);
          const u32 physical = swizzle_address(s, logical);
          EXPECT_EQ(physical / static_cast<u32>(span), static_cast<u32>(row)) << "a swizzle stays in its row";
          EXPECT_EQ(physical % 16, static_cast<u32>(byte)) << "and moves whole 16-byte chunks";
          EXPECT_EQ(static_cast<int>(physical % static_cast<u32>(span)) / 16, expected_chunk(s, row, chunk))
              << "span " << span << " row " << row << " chunk " << chunk;
        }
      }
    }
    // The pattern repeats every atom, and is a bijection within one.
    std::set<u32> seen;
    for (u32 a = 0; a < static_cast<u32>(atom); ++a) {
      seen.insert(swizzle_address(s, a));
      EXPECT_EQ(swizzle_address(s, a + static_cast<u32>(atom)), swizzle_address(s, a) + static_cast<u32>(atom));
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(atom));
  }
  EXPECT_EQ(swizzle_atom_bytes(Swizzle::k128B), 1024);
  EXPECT_EQ(swizzle_atom_bytes(Swizzle::k64B), 512);
  EXPECT_EQ(swizzle_atom_bytes(Swizzle::k32B), 256);
}

TEST(HopperLayoutTest, DescriptorFieldsSitWhereTheIsaPutsThem) {
  MatrixDescriptor d;
  d.start = 0x3FFF0;
  d.leading_bytes = 16;
  d.stride_bytes = 1024;
  d.base_offset = 5;
  d.swizzle = Swizzle::k128B;
  const u64 bits = encode_descriptor(d);
  EXPECT_EQ(bits & 0x3FFF, 0x3FFFU) << "bits 0-13: start >> 4";
  EXPECT_EQ((bits >> 16) & 0x3FFF, 1U) << "bits 16-29: LBO >> 4";
  EXPECT_EQ((bits >> 32) & 0x3FFF, 64U) << "bits 32-45: SBO >> 4";
  EXPECT_EQ((bits >> 49) & 7, 5U) << "bits 49-51: base offset";
  EXPECT_EQ(bits >> 62, 1U) << "bits 62-63: 1 is 128B";
  EXPECT_EQ(bits & ((3ULL << 14) | (3ULL << 30) | (7ULL << 46) | (0x3FFULL << 52)), 0U) << "reserved bits clear";
  for (Swizzle s : {Swizzle::kNone, Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
    d.swizzle = s;
    const MatrixDescriptor back = decode_descriptor(encode_descriptor(d));
    EXPECT_EQ(back.start, d.start);
    EXPECT_EQ(back.leading_bytes, d.leading_bytes);
    EXPECT_EQ(back.stride_bytes, d.stride_bytes);
    EXPECT_EQ(back.base_offset, d.base_offset);
    EXPECT_EQ(back.swizzle, s);
  }
  EXPECT_EQ(encode_descriptor({.swizzle = Swizzle::k64B}) >> 62, 2U);
  EXPECT_EQ(encode_descriptor({.swizzle = Swizzle::k32B}) >> 62, 3U);
}

// A K-major tile of R rows and K columns of 16-bit elements, written the way
// TMA writes a box whose inner dimension is the span (rows of span bytes,
// swizzled), is read back element for element through a descriptor with
// SBO = 8 rows and the start advanced 32 bytes per K step of 16.
TEST(HopperLayoutTest, AKMajorSwizzledBoxIsReadBackThroughItsDescriptor) {
  for (Swizzle s : {Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
    const int span = swizzle_span(s);
    const int cols = span / 2;
    constexpr int kRows = 64;
    for (int r = 0; r < kRows; ++r) {
      for (int k = 0; k < cols; ++k) {
        const u32 written = swizzle_address(s, static_cast<u32>(r * span + k * 2));
        MatrixDescriptor d;
        d.start = static_cast<u32>((k / kWgmmaK) * 32);
        d.stride_bytes = static_cast<u32>(8 * span);
        d.swizzle = s;
        EXPECT_EQ(operand_shared_address(d, Major::kK, r, k % kWgmmaK), written)
            << "span " << span << " (" << r << ", " << k << ")";
      }
    }
  }
}

// The unswizzled K-major layout: core matrices of 8 rows x 16 bytes, the
// second 8 elements of K at LBO, the next 8 rows at SBO.
TEST(HopperLayoutTest, UnswizzledKMajorIsCoreMatricesAtLboAndSbo) {
  MatrixDescriptor d;
  d.start = 256;
  d.leading_bytes = 128;  // K-adjacent core matrices
  d.stride_bytes = 256;   // M/N-adjacent core matrices
  EXPECT_EQ(operand_address(d, Major::kK, 0, 0), 256U);
  EXPECT_EQ(operand_address(d, Major::kK, 1, 0), 256U + 16);
  EXPECT_EQ(operand_address(d, Major::kK, 0, 7), 256U + 14);
  EXPECT_EQ(operand_address(d, Major::kK, 0, 8), 256U + 128);
  EXPECT_EQ(operand_address(d, Major::kK, 8, 0), 256U + 256);
  EXPECT_EQ(operand_address(d, Major::kK, 9, 9), 256U + 256 + 16 + 128 + 2);
}

// MN-major: M or N is contiguous. Swizzled, an atom is 8 K-rows of the span;
// the next S/2 elements of M/N are LBO away, the next 8 K-rows SBO away.
TEST(HopperLayoutTest, MnMajorStepsAtomsByLboAlongMnAndSboAlongK) {
  MatrixDescriptor d;
  d.swizzle = Swizzle::k128B;
  d.leading_bytes = 8192;  // 64 K-rows of 128 bytes: the next 64 columns
  d.stride_bytes = 1024;   // the next 8 K-rows
  EXPECT_EQ(operand_address(d, Major::kMN, 5, 0), 10U);
  EXPECT_EQ(operand_address(d, Major::kMN, 0, 3), 3U * 128);
  EXPECT_EQ(operand_address(d, Major::kMN, 64 + 5, 0), 8192U + 10);
  EXPECT_EQ(operand_address(d, Major::kMN, 0, 8 + 1), 1024U + 128);
  // Row 3 of the atom: chunk 0 of logical bytes 384.. is stored at chunk 3.
  EXPECT_EQ(operand_shared_address(d, Major::kMN, 0, 3), 3U * 128 + 3 * 16);
  MatrixDescriptor plain;
  plain.leading_bytes = 512;  // the next 8 K-rows
  plain.stride_bytes = 128;   // the next 8 elements of M/N
  EXPECT_EQ(operand_address(plain, Major::kMN, 3, 2), 3U * 2 + 2 * 16);
  EXPECT_EQ(operand_address(plain, Major::kMN, 8 + 3, 8 + 2), 128U + 6 + 512 + 32);
}

// The accumulator of m64nN: each of the 128 threads holds N/2 values, and
// together they cover the 64 x N tile once, for several N; warp w owns rows
// 16w..16w+15 and within 8 columns it is mma.m16n8's C fragment.
TEST(HopperLayoutTest, TheAccumulatorFragmentCoversTheTileOnce) {
  for (int n : {8, 16, 64, 136, 256}) {
    std::set<std::pair<int, int>> covered;
    for (int t = 0; t < kWarpgroupSize; ++t) {
      for (int i = 0; i < n / 2; ++i) {
        const int row = accumulator_row(t, i);
        const int col = accumulator_col(t, i);
        ASSERT_GE(row, 16 * (t / 32));
        ASSERT_LT(row, 16 * (t / 32) + 16);
        ASSERT_LT(col, n);
        covered.insert({row, col});
      }
    }
    EXPECT_EQ(covered.size(), static_cast<std::size_t>(kWgmmaM * n)) << "N " << n;
  }
  // The ISA's figure for thread 5 (lane 5 of warp 0): rows 1 and 9, columns 2 and 3 of each 8.
  EXPECT_EQ(accumulator_row(5, 0), 1);
  EXPECT_EQ(accumulator_col(5, 0), 2);
  EXPECT_EQ(accumulator_col(5, 1), 3);
  EXPECT_EQ(accumulator_row(5, 2), 9);
  EXPECT_EQ(accumulator_col(5, 4), 10);
  EXPECT_EQ(accumulator_row(37, 0), 17);  // warp 1, lane 5
}

TEST(HopperLayoutTest, TheRegisterAFragmentCoversA64x16TileOnce) {
  std::set<std::pair<int, int>> covered;
  for (int t = 0; t < kWarpgroupSize; ++t) {
    for (int q = 0; q < 4; ++q) {
      for (int h = 0; h < 2; ++h) covered.insert({a_fragment_row(t, q), a_fragment_col(t, q, h)});
    }
  }
  EXPECT_EQ(covered.size(), static_cast<std::size_t>(kWgmmaM * kWgmmaK));
  EXPECT_EQ(a_fragment_row(6, 1), 9);      // lane 6: row 1, +8 for registers 1 and 3
  EXPECT_EQ(a_fragment_col(6, 2, 1), 13);  // register 2: columns 8 + 2 * (6 % 4) + 1
}

}  // namespace
}  // namespace attune::sm90
