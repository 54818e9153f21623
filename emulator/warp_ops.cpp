#include "emulator/warp_ops.h"

#include <bit>

#include "core/dtype.h"

namespace attune::emu {

namespace {

float element(bool bf16, u32 pair, int half) {
  const auto bits = static_cast<u16>(half == 0 ? pair & 0xFFFFU : pair >> 16);
  return bf16 ? bfloat16_bits_to_float(bits) : half_bits_to_float(bits);
}

}  // namespace

LaneFloats4 mma_m16n8k16(bool bf16, const LaneWords4& a, const LaneWords2& b, const LaneFloats4& c) {
  float am[16][16];
  float bm[16][8];
  float cm[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int group = lane / 4;
    const int pair_col = 2 * (lane % 4);
    // A: reg 0 rows 0-7 cols 0-7, reg 1 rows 8-15 cols 0-7, reg 2 rows 0-7
    // cols 8-15, reg 3 rows 8-15 cols 8-15; two columns per register.
    for (int reg = 0; reg < 4; ++reg) {
      const int row = group + 8 * (reg % 2);
      const int col = pair_col + 8 * (reg / 2);
      am[row][col] = element(bf16, a[lane][reg], 0);
      am[row][col + 1] = element(bf16, a[lane][reg], 1);
    }
    // B (k x n, "col"): reg 0 holds k = pair_col, +1; reg 1 k + 8; n = group.
    for (int reg = 0; reg < 2; ++reg) {
      const int k = pair_col + 8 * reg;
      bm[k][group] = element(bf16, b[lane][reg], 0);
      bm[k + 1][group] = element(bf16, b[lane][reg], 1);
    }
    // C/D: c0, c1 at (group, pair_col + 0/1); c2, c3 at (group + 8, ...).
    for (int i = 0; i < 4; ++i) cm[group + 8 * (i / 2)][pair_col + i % 2] = c[lane][i];
  }
  LaneFloats4 d{};
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int group = lane / 4;
    const int pair_col = 2 * (lane % 4);
    for (int i = 0; i < 4; ++i) {
      const int row = group + 8 * (i / 2);
      const int col = pair_col + i % 2;
      float acc = cm[row][col];
      for (int k = 0; k < 16; ++k) acc += am[row][k] * bm[k][col];
      d[lane][i] = acc;
    }
  }
  return d;
}

std::array<std::array<u32, 4>, kWarpSize> ldmatrix(int matrices, bool trans, const std::array<Matrix8x8, 4>& rows) {
  std::array<std::array<u32, 4>, kWarpSize> out{};
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int r = lane / 4;
    const int c = 2 * (lane % 4);
    for (int m = 0; m < matrices; ++m) {
      const Matrix8x8& mat = rows[static_cast<std::size_t>(m)];
      const u16 lo = trans ? mat[c][r] : mat[r][c];
      const u16 hi = trans ? mat[c + 1][r] : mat[r][c + 1];
      out[lane][m] = static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
    }
  }
  return out;
}

std::array<u32, kWarpSize> shuffle(const std::array<u32, kWarpSize>& values, const std::array<i32, kWarpSize>& operands,
                                   bool xor_mode) {
  std::array<u32, kWarpSize> out{};
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const i32 op = operands[lane];
    // With width 32 (c = 0x1f) both modes use the low five bits of the
    // operand (bval[4:0]), so every source lane is inside the warp.
    const int bits = op & (kWarpSize - 1);
    const int src = xor_mode ? (lane ^ bits) : bits;
    out[lane] = values[src];
  }
  return out;
}

}  // namespace attune::emu
