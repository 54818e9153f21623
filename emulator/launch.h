// One launch as every backend takes it: the emulator here, the CUDA driver
// backend of the runtime with the same struct.
#pragma once

#include <cstdint>

#include "templates/primitives/config.h"

namespace attune {

struct LaunchConfig {
  Dim3 grid;                              // blocks
  Dim3 block;                             // threads per block
  std::int64_t dynamic_shared_bytes = 0;  // size of shared_memory<T>()
  Dim3 cluster;                           // blocks per thread block cluster (sm_90); the grid is whole clusters
};

inline std::int64_t volume(const Dim3& d) { return static_cast<std::int64_t>(d.x) * d.y * d.z; }

}  // namespace attune
