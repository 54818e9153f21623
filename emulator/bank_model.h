// How many shared-memory wavefronts one warp-wide access takes, by the bank
// model of NVIDIA GPUs from Volta on (CUDA C++ Programming Guide, "Shared
// Memory" of compute capabilities 7.x-9.x; Nsight Compute's wavefront
// metrics): shared memory has 32 banks of 4 bytes; a warp's request is served
// in phases: all 32 lanes at once for accesses of up to 4 bytes, half-warps
// for 8 bytes, quarter-warps for 16 bytes, and one phase per 8x8 matrix of
// ldmatrix (its 8 row addresses of 16 bytes). Within a phase, lanes that
// touch distinct 4-byte words of one bank are served one after another; lanes
// reading the same word share it (broadcast). The ideal is the bytes moved
// over 128 bytes per wavefront.
//
//   const Wavefronts w = access_wavefronts(lanes);   // one warp instruction
//   w.actual / w.ideal                               // 8 for 8 rows of 128 B in one bank group
#pragma once

#include <cstdint>
#include <span>

namespace attune::emu {

struct LaneAccess {
  int lane = 0;
  std::uint64_t offset = 0;  // byte offset in shared memory
  std::uint32_t bytes = 0;   // 1, 2, 4, 8 or 16
};

struct Wavefronts {
  std::uint64_t actual = 0;
  std::uint64_t ideal = 0;
};

// A plain load or store (or a cp.async write) by the lanes that executed it.
Wavefronts access_wavefronts(std::span<const LaneAccess> lanes);

// An ldmatrix: the 16-byte row addresses of its matrices, 8 per matrix, in
// matrix order (lanes 0-7 give matrix 0, ...).
Wavefronts ldmatrix_wavefronts(std::span<const std::uint64_t> row_offsets);

}  // namespace attune::emu
