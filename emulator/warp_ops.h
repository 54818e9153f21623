// The arithmetic of warp-wide instructions, as the PTX ISA defines it, over
// the operands of all 32 lanes at once. Pure functions: the scheduler
// gathers operands at the rendezvous and scatters the results.
#pragma once

#include <array>

#include "templates/primitives/config.h"

namespace attune::emu {

using LaneWords4 = std::array<std::array<u32, 4>, kWarpSize>;
using LaneWords2 = std::array<std::array<u32, 2>, kWarpSize>;
using LaneFloats4 = std::array<std::array<float, 4>, kWarpSize>;

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32:
// D = A (16x16) * B (16x8) + C with the ISA's fragment layouts; products are
// exact in fp32 and summed in k order onto C, in fp32.
LaneFloats4 mma_m16n8k16(bool bf16, const LaneWords4& a, const LaneWords2& b, const LaneFloats4& c);

// ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.b16 given the 8 16-byte rows of
// each matrix (rows[m][r] = row r of matrix m, as 8 halves). Lane L gets, in
// register m, elements (L/4, 2*(L%4)) and (L/4, 2*(L%4)+1) of matrix m, or of
// its transpose with .trans.
using Matrix8x8 = std::array<std::array<u16, 8>, 8>;
std::array<std::array<u32, 4>, kWarpSize> ldmatrix(int matrices, bool trans, const std::array<Matrix8x8, 4>& rows);

// shfl.sync.bfly / .idx over a full warp (width 32, all lanes active).
std::array<u32, kWarpSize> shuffle(const std::array<u32, kWarpSize>& values, const std::array<i32, kWarpSize>& operands,
                                   bool xor_mode);

}  // namespace attune::emu
