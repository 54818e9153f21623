#include "profile/arch_rates.h"

#include "core/error.h"

namespace attune::profile {

ArchRates arch_rates(const std::string& arch) {
  ArchRates r;
  r.arch = arch;
  if (arch == "sm_80") {
    // A100 SXM: 312 dense fp16/bf16 TFLOP/s at 1.41 GHz on 108 SMs = 2048
    // FLOP/clock/SM, which mma.sync reaches.
    r.example = "A100 SXM";
    r.sm_count = 108;
    r.clock_ghz = 1.41;
    r.mma_flops_per_clock = 2048;
    r.shared_bytes_per_sm = 164 * 1024;
    r.source =
        "A100 whitepaper (312 TFLOP/s fp16 dense, 108 SMs, 1410 MHz); CUDA guide: 32 banks x 4 B per clock, "
        "16 MUFU results per clock per SM (4 per quadrant)";
  } else if (arch == "sm_86" || arch == "sm_89") {
    r.example = arch == "sm_86" ? "A6000 / RTX 3090 class" : "L40S / RTX 4090 class";
    r.sm_count = arch == "sm_86" ? 84 : 142;
    r.clock_ghz = arch == "sm_86" ? 1.80 : 2.52;
    r.mma_flops_per_clock = 1024;  // half of sm_80's per SM with fp32 accumulation on consumer parts
    r.shared_bytes_per_sm = 100 * 1024;
    r.source = "Ampere/Ada GA10x and AD10x whitepapers (fp16 with fp32 accumulate: 1024 FLOP/clock/SM)";
  } else if (arch == "sm_90" || arch == "sm_90a") {
    // H100/H200 SXM: 989 dense bf16 TFLOP/s on 132 SMs = 4096 FLOP/clock/SM
    // at 1.83 GHz, through wgmma. mma.sync is not documented; micro-
    // benchmarks put it at about two thirds of that: assumed 2730.
    r.example = "H200 SXM";
    r.sm_count = 132;
    r.clock_ghz = 1.83;
    r.mma_flops_per_clock = 2730;
    r.wgmma_flops_per_clock = 4096;
    r.shared_bytes_per_sm = 228 * 1024;
    r.source =
        "H100 whitepaper (989 TFLOP/s bf16 dense via wgmma, 132 SMs: 4096 FLOP/clock/SM at 1.83 GHz); "
        "mma.sync assumed at 2/3 of it (to be checked by tools/gpu_check.sh); 32 banks x 4 B per clock; "
        "16 MUFU per clock per SM";
  } else {
    throw InvalidArgument("profile: architecture '" + arch + "' has no rates; expected sm_80, sm_86, sm_89, sm_90a");
  }
  return r;
}

}  // namespace attune::profile
