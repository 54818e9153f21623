// Writes the tables of docs/perf/layouts.md: for the heuristic forward
// variant at d64 and d128, fp16 and bf16, sm_80 and sm_90a, the speed model
// before (the kept unswizzled copy of the kernels, tests/kernels/mutants)
// and after (the kernels): shared wavefronts per key tile against their
// ideal, the SASS mix, the limiter and the bound.
//
//   build/dev/tests/kernels/layouts_report > /tmp/layouts.md
// (needs NVRTC for the kernels' SASS and nvcc for the unswizzled copy's,
// and nvdisasm; a column it cannot fill says why.)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "generated/kernel_shapes.h"
#include "profile/profile.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/launch/flash_fwd_params.h"
#include "tests/kernels/unswizzled_run.h"

namespace attune {
namespace {

// The SASS mix of the unswizzled copy of one instantiation, through nvcc.
profile::SassMix unswizzled_sass(const std::string& instantiation, const std::string& arch, std::string* note) {
  const std::string dir = "/tmp/attune-layouts-" + std::to_string(::getpid());
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(dir + "/k.cu") << "#include \"mutants/unswizzled.cuh\"\ntemplate __global__ void " << instantiation
                               << "(attune::unswizzled::FlashFwdParams);\n";
  const std::string command = "nvcc -std=c++20 -I" + std::string(ATTUNE_SOURCE_DIR) + " -I" +
                              std::string(ATTUNE_MUTANTS_DIR) + " -cubin -arch=" + arch + " " + dir + "/k.cu -o " +
                              dir + "/k.cubin > " + dir + "/log 2>&1";
  if (std::system(command.c_str()) != 0) {
    *note = "nvcc failed";
    return {};
  }
  std::ifstream in(dir + "/k.cubin", std::ios::binary);
  const std::vector<char> cubin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::system(("rm -rf " + dir).c_str());
  try {
    return profile::count_sass(profile::disassemble(cubin));
  } catch (const Error& e) {
    *note = e.what();
    return {};
  }
}

std::string mix_text(const profile::SassMix& mix) {
  if (mix.empty()) return "-";
  std::string out;
  for (const char* op : {"HMMA", "LDSM", "LDS", "STS", "LDGSTS", "MUFU.EX2"}) {
    const auto it = mix.find(op);
    out += (out.empty() ? "" : " ") + std::string(op) + " " + std::to_string(it == mix.end() ? 0 : it->second);
  }
  // The address arithmetic the layout costs shows in the rest.
  int all = 0;
  for (const auto& [op, n] : mix) all += n;
  return out + ", all " + std::to_string(all);
}

template <int kD, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, int kQRegs>
void row(const char* arch, DType dtype) {
  const profile::ArchRates rates = profile::arch_rates(arch);
  const Variant after_variant = heuristic_variant("fwd", dtype, kD, kD, require_arch(arch));
  const FlashFwdShape expected{kD, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kQRegs};
  if (FlashFwdShape::of(after_variant) != expected) {
    std::printf("| %s | %s | d%d | the heuristic is now %s; update layouts_report.cpp |\n", arch,
                std::string(to_string(dtype)).c_str(), kD, after_variant.id().c_str());
    return;
  }
  const profile::VariantProfile after = profile::profile_variant(after_variant, arch, {.dtype = dtype});
  const auto counts = [&](int tiles) {
    return dtype == DType::kBF16
               ? testing::run_unswizzled<kD, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kQRegs, Bf16>(after_variant,
                                                                                                        dtype, tiles)
               : testing::run_unswizzled<kD, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kQRegs, Fp16>(after_variant,
                                                                                                        dtype, tiles);
  };
  const profile::PerKeyTile before =
      profile::tile_costs(counts(4).minus(counts(2)), 2, {double(kBlockM), double(kBlockN), double(kD), false});
  const profile::Bound before_bound = profile::bound_of(before, rates, rates.sm_count, rates.clock_ghz);
  std::string note;
  const std::string instantiation = "attune::unswizzled::flash_fwd<" + std::to_string(kD) + ", " +
                                    std::to_string(kBlockM) + ", " + std::to_string(kBlockN) + ", " +
                                    std::to_string(kWarpsM) + ", " + std::to_string(kWarpsN) + ", " +
                                    std::to_string(kStages) + ", " + std::to_string(kQRegs) +
                                    ", attune::" + (dtype == DType::kBF16 ? "Bf16" : "Fp16") + ", 0, 0, 0, 0>";
  const profile::SassMix before_sass = unswizzled_sass(instantiation, arch, &note);
  const profile::PerKeyTile& t = after.per_key_tile;
  std::printf("| %s | %s | `%s` | %.2f | %.2f | %s | %s | %s %.0f | %s %.0f |\n", arch,
              std::string(to_string(dtype)).c_str(), after_variant.id().c_str(),
              before.smem_wavefronts / before.smem_wavefronts_ideal, t.smem_wavefronts / t.smem_wavefronts_ideal,
              mix_text(before_sass).c_str(), mix_text(after.sass).c_str(), before_bound.limiter.c_str(),
              before_bound.tflops, after.bound.limiter.c_str(), after.bound.tflops);
}

}  // namespace
}  // namespace attune

int main() {
  using attune::DType;
  std::printf(
      "| arch | dtype | heuristic variant | wavefronts / ideal before | after | SASS before | SASS after | "
      "bound before (TFLOP/s) | after |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      attune::row<64, 64, 64, 4, 1, 2, 1>(arch, dtype);
      attune::row<128, 64, 32, 4, 1, 2, 1>(arch, dtype);
    }
  }
  return 0;
}
