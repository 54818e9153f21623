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
  i32 n = 0;             // 8..256
  bool trans_a = false;  // A MN-major (shared A only)
  bool trans_b = false;  // B MN-major
  bool a_in_registers = false;
  u64 desc_a = 0;  // shared A only
  u64 desc_b = 0;
  bool operator==(const WgmmaShape&) const = default;
};

using WarpgroupARegisters = std::array<std::array<u32, 4>, sm90::kWarpgroupSize>;

// The shared-window address of every 16-bit element one wgmma reads (B's,
// then A's when it is in shared memory): for bounds checks and in-flight marks.
std::vector<u32> wgmma_operand_addresses(const WgmmaShape& shape);

// D = A (64 x 16) * B (16 x N) + (accumulate ? C : 0): products exact in fp32,
// summed in k order onto C, in fp32 (as mma.sync). `read_u16(address)` reads
// the 16-bit element at a shared-window address; acc[t] holds thread t's N/2
// accumulators, C on entry and D on return.
void wgmma_compute(const WgmmaShape& shape, const std::function<u16(u32)>& read_u16, const WarpgroupARegisters& a,
                   bool accumulate, std::vector<std::vector<float>>& acc);

}  // namespace attune::emu
