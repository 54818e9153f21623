// What one SM of an architecture can do per clock, as NVIDIA documents it
// (and, where a documented figure does not exist for the instruction the
// kernels use, an assumption stated here, to be checked by a GPU run), and
// the limits that decide how many CTAs share an SM.
#pragma once

#include <string>

namespace attune::profile {

struct ArchRates {
  std::string arch;                        // sm_90a
  std::string example;                     // "H200 SXM"
  int sm_count = 0;                        // of the example part
  double clock_ghz = 0;                    // the clock its peak figures are quoted at
  double mma_flops_per_clock = 0;          // mma.sync m16n8k16 fp16/bf16 with fp32 accumulators, per SM
  double wgmma_flops_per_clock = 0;        // wgmma (sm_90a), per SM; 0 where there is none
  double shared_wavefronts_per_clock = 1;  // 128 bytes per clock per SM
  double mufu_per_clock = 16;              // ex2.approx results per SM
  double issue_per_clock = 4;              // warp instructions per SM (four schedulers)
  int registers_per_sm = 65536;
  int max_threads_per_sm = 2048;
  int max_ctas_per_sm = 32;
  int shared_bytes_per_sm = 0;  // usable by CTAs (the rest is the L1 carve-out minimum)
  std::string source;           // where the figures come from
};

// The rates of "sm_80", "sm_86", "sm_89", "sm_90" / "sm_90a"; InvalidArgument otherwise.
ArchRates arch_rates(const std::string& arch);

}  // namespace attune::profile
