// The arithmetic of wgmma.mma_async (PTX ISA 9.7.15) over the operands of a
// whole warpgroup: A from shared memory through its matrix descriptor or
// from the 128 threads' registers, B from shared memory, fp32 accumulators in
// the ISA's fragment layout (templates/primitives/hopper_layout.h). A pure
// function of its inputs: the scheduler decides when it runs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "templates/primitives/hopper_layout.h"

namespace attune::emu {

struct WgmmaShape {
  bool bf16 = false;
  i32 fp8 = 0;           // 8-bit inputs: 1 e4m3, 2 e5m2 (k32, K-major); 0: 16-bit (bf16 says which)
  i32 n = 0;             // 8..256
  bool trans_a = false;  // A MN-major (shared A only)
  bool trans_b = false;  // B MN-major
  bool a_in_registers = false;
  u64 desc_a = 0;  // shared A only
  u64 desc_b = 0;
  bool operator==(const WgmmaShape&) const = default;
};

using WarpgroupARegisters = std::array<std::array<u32, 4>, sm90::kWarpgroupSize>;

// K of one wgmma (16, or 32 for 8-bit inputs) and the bytes of an element.
inline i32 wgmma_k(const WgmmaShape& shape) { return shape.fp8 != 0 ? sm90::kWgmmaK8 : sm90::kWgmmaK; }
inline i32 wgmma_element_bytes(const WgmmaShape& shape) { return shape.fp8 != 0 ? 1 : 2; }

// The shared-window address of every element one wgmma reads (B's, then
// A's when it is in shared memory): for bounds checks and in-flight marks.
std::vector<u32> wgmma_operand_addresses(const WgmmaShape& shape);

// D = A (64 x K) * B (K x N) + (accumulate ? C : 0): products exact in fp32,
// summed in k order onto C, in fp32 (as mma.sync). `read_u16(address)` reads
// the element at a shared-window address (an 8-bit one in the low byte);
// acc[t] holds thread t's N/2 accumulators, C on entry and D on return.
void wgmma_compute(const WgmmaShape& shape, const std::function<u16(u32)>& read_u16, const WarpgroupARegisters& a,
                   bool accumulate, std::vector<std::vector<float>>& acc);

}  // namespace attune::emu
