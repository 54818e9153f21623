// Compiles a list of kernel variants with NVRTC on two threads and checks
// what every kernel test of the NVRTC sweep checks: each compiles, ptxas
// reports its registers (at most 255), and spills are printed and counted.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "generator/variants.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "tests/support/covering_set.h"

namespace attune::testing {

struct SweepSummary {
  int compiled = 0;
  int spilling = 0;
  int most_registers = 0;
  std::vector<int> spill_bytes;  // per variant, in order; -1 where it failed to compile
};

// Each variant compiled (on two threads: CI has two cores), variant i in
// dtype_of(i); the results in the variants' order.
inline std::vector<CompileResult> compile_all(const std::vector<Variant>& variants,
                                              const std::function<DType(std::size_t)>& dtype_of, const char* arch,
                                              const char* program_name) {
  std::vector<CompileResult> results(variants.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < variants.size(); i = next++) {
        results[i] = compile_with_nvrtc(variants[i].kernel->source, program_name,
                                        variants[i].name_expression(dtype_of(i)), arch);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return results;
}

inline SweepSummary compile_sweep(const std::vector<Variant>& variants, DType dtype, const char* arch,
                                  const char* program_name) {
  const std::vector<CompileResult> results = compile_all(
      variants, [dtype](std::size_t) { return dtype; }, arch, program_name);
  SweepSummary summary;
  summary.spill_bytes.assign(variants.size(), -1);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const CompileResult& r = results[i];
    EXPECT_TRUE(r.ok) << variants[i].id() << ":\n" << r.log;
    if (!r.ok) continue;
    summary.spill_bytes[i] = r.spill_bytes;
    ++summary.compiled;
    EXPECT_GT(r.registers, 0) << variants[i].id() << ": no ptxas register count in\n" << r.log;
    EXPECT_LE(r.registers, 255) << variants[i].id();
    summary.most_registers = std::max(summary.most_registers, r.registers);
    if (r.spills()) {
      ++summary.spilling;
      std::cout << "spills: " << variants[i].id() << " " << r.spill_bytes << " bytes\n";
    }
  }
  std::cout << variants.size() << " variants, " << summary.spilling << " spilling, at most " << summary.most_registers
            << " registers\n";
  return summary;
}

// `kernels` (e.g. the small kernels an op's calls also run) compile for
// sm_80 and sm_90a in both dtypes, none spilling.
inline void expect_compiled_everywhere_without_spills(const std::vector<Variant>& kernels, const char* program_name) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      const SweepSummary summary = compile_sweep(kernels, dtype, arch, program_name);
      EXPECT_EQ(summary.compiled, static_cast<int>(kernels.size())) << arch << " " << to_string(dtype);
      EXPECT_EQ(summary.spilling, 0) << arch << " " << to_string(dtype);
    }
  }
}

// The cases every kernel's NVRTC test runs, a covering set: head dims 64
// and 128 on sm_80 and on sm_90a, each once, with the dtypes alternating so
// both are compiled on both architectures. fp16 and bf16 variants differ
// only in their conversions (same tiles, registers within a few of each
// other), so the full product doubled the time for no new variant; with a
// readable test name.
struct NvrtcCase {
  DType dtype;
  int head_dim;
  const char* arch;
};

// How GoogleTest prints a case (else as raw bytes, pointer included).
// NOLINTNEXTLINE(readability-identifier-naming)
inline void PrintTo(const NvrtcCase& c, std::ostream* out) {
  *out << to_string(c.dtype) << " d" << c.head_dim << " " << c.arch;
}

inline auto nvrtc_cases() {
  return ::testing::Values(NvrtcCase{DType::kF16, 64, "sm_80"}, NvrtcCase{DType::kBF16, 128, "sm_80"},
                           NvrtcCase{DType::kBF16, 64, "sm_90a"}, NvrtcCase{DType::kF16, 128, "sm_90a"});
}

// The sweep of one case: a covering set of the op's portable family in the
// case's head-dim bucket (every value of every tunable, and for the forward
// every warp partition), or every variant of it when ATTUNE_<OP>_SWEEP=all
// (ATTUNE_FWD_SWEEP, ATTUNE_BWD_SWEEP, ATTUNE_DECODE_SWEEP), plus `extra`
// (e.g. the kernels every call of the op also runs). Each compiles without
// spills; the counts are recorded as test properties. The full sweeps took
// about twelve minutes of CI's two cores and passed with 0 spills
// (docs/perf/resources.md); the covering sets take about one.
inline void sweep_op(const NvrtcCase& c, std::string_view op, std::vector<Variant> extra = {}) {
  std::string variable = "ATTUNE_" + std::string(op) + "_SWEEP";
  std::transform(variable.begin(), variable.end(), variable.begin(), [](unsigned char ch) { return std::toupper(ch); });
  const char* all = std::getenv(variable.c_str());
  const KernelSpec& kernel = kernel_for_op(op);
  std::vector<Variant> variants;
  if (all != nullptr && std::string_view(all) == "all") {
    // The op's portable family (flash_fwd_sm90 has its own sweep).
    variants = family_variants(kernel, *parse_arch(c.arch), c.head_dim, c.dtype);
  } else {
    variants = covering_set_of(kernel, *parse_arch(c.arch), c.head_dim);
  }
  ASSERT_FALSE(variants.empty());
  variants.insert(variants.end(), extra.begin(), extra.end());
  const std::string program = std::string(kernel.name) + ".cu";
  const SweepSummary summary = compile_sweep(variants, c.dtype, c.arch, program.c_str());
  EXPECT_EQ(summary.compiled, static_cast<int>(variants.size()));
  // No variant of head dims 64 and 128 spills (the tile layout's addresses
  // are part of the register budget: see SmemTile::LaneOffsets).
  EXPECT_EQ(summary.spilling, 0) << c.arch << " d" << c.head_dim;
  ::testing::Test::RecordProperty("variants", static_cast<int>(variants.size()));
  ::testing::Test::RecordProperty("spilling", summary.spilling);
}

inline std::string nvrtc_case_name(const ::testing::TestParamInfo<NvrtcCase>& info) {
  return std::string(to_string(info.param.dtype)) + "_d" + std::to_string(info.param.head_dim) + "_" + info.param.arch;
}

}  // namespace attune::testing
