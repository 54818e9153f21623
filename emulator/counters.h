// What the emulator counts while it runs a kernel, for the speed model
// (attune variants profile): warp instructions of the tensor cores and of
// the warp collectives, shared-memory wavefronts against their ideal (by the
// bank model, per template line), exponentials, barriers and global bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attune::emu {

// One template line's shared-memory traffic.
struct SiteTraffic {
  std::string site;                // templates/flash_tile.cuh:123
  std::uint64_t instructions = 0;  // warp instructions
  std::uint64_t wavefronts = 0;
  std::uint64_t ideal = 0;
};

struct LaunchCounters {
  std::uint64_t mma = 0;                  // mma.sync m16n8k16, per warp
  std::uint64_t wgmma = 0;                // wgmma.mma_async, per warpgroup
  std::uint64_t wgmma_flops = 0;          // their FLOPs: 2 x 64 x N x 16 each
  std::uint64_t ldmatrix = 0;             // per warp
  std::uint64_t shuffles = 0;             // per warp
  std::uint64_t shared_instructions = 0;  // per warp: plain loads, stores and cp.async writes
  std::uint64_t shared_wavefronts = 0;    // of all shared accesses, ldmatrix included
  std::uint64_t shared_ideal = 0;
  std::uint64_t ex2 = 0;           // ex2.approx, per thread
  std::uint64_t tanh = 0;          // tanh.approx (softcap), per thread: the same MUFU pipe
  std::uint64_t barriers = 0;      // block::sync, per block
  std::uint64_t global_bytes = 0;  // read and written, cp.async sources included
  std::map<std::string, SiteTraffic> sites;

  void add(const LaunchCounters& other);
  // shared_wavefronts / shared_ideal (1 when there was no shared access).
  double ratio() const;
  // The sites with the most wavefronts beyond their ideal, worst first.
  std::vector<SiteTraffic> worst(std::size_t count) const;
  // These counters less `base` (for the difference of two runs).
  LaunchCounters minus(const LaunchCounters& base) const;
};

}  // namespace attune::emu
