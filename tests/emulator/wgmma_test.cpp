// wgmma on the emulator: a one-warpgroup GEMM (wgmma_gemm.cuh) matches an
// fp64 matmul in fp16 and bf16 for several N, every swizzle mode, K- and
// MN-major operands and A in registers, with no report; and one planted bug
// per Hopper detector is reported with its kind at its template line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "emulator/emulator.h"
#include "tests/emulator/planted_bug.h"
#include "tests/emulator/planted_report.h"
#include "tests/emulator/wgmma_fp8_gemm.cuh"
#include "tests/emulator/wgmma_fp8_pv.cuh"
#include "tests/emulator/wgmma_gemm.cuh"

namespace attune {
namespace {

using emu::BugKind;
using sm90::Swizzle;
using test_kernels::GemmParams;

struct Run {
  std::vector<float> c;
  std::vector<double> reference;
  std::vector<double> magnitude;  // sum of |a||b| per element
};

template <class D, i32 kN, Swizzle kSwizzle, bool kTransA, bool kTransB, bool kARegisters>
Run run_gemm(i32 plant) {
  std::mt19937 rng(kN * 7 + static_cast<int>(kSwizzle));
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<u16> a(64 * 32), b(static_cast<std::size_t>(32 * kN));
  for (u16& x : a) x = testing::bits_of<D>(dist(rng));
  for (u16& x : b) x = testing::bits_of<D>(dist(rng));
  Run run;
  run.c.assign(static_cast<std::size_t>(64 * kN), -1.0F);
  run.reference.assign(run.c.size(), 0.0);
  run.magnitude.assign(run.c.size(), 0.0);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int k = 0; k < 32; ++k) {
        const double p = testing::value_of<D>(a[static_cast<std::size_t>(m * 32 + k)]) *
                         testing::value_of<D>(b[static_cast<std::size_t>(k * kN + n)]);
        run.reference[static_cast<std::size_t>(m * kN + n)] += p;
        run.magnitude[static_cast<std::size_t>(m * kN + n)] += std::abs(p);
      }
    }
  }
  emu::Emulator emulator;
  emulator.register_buffer("a", a.data(), a.size() * 2);
  emulator.register_buffer("b", b.data(), b.size() * 2);
  emulator.register_buffer("c", run.c.data(), run.c.size() * 4);
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::gemm_shared_bytes<kN, kSwizzle, kTransA, kTransB>()};
  emulator.launch(&test_kernels::wgmma_gemm<D, kN, kSwizzle, kTransA, kTransB, kARegisters>, config,
                  GemmParams{a.data(), b.data(), run.c.data(), plant});
  return run;
}

template <class D, i32 kN, Swizzle kSwizzle, bool kTransA, bool kTransB, bool kARegisters>
void expect_matches_fp64() {
  SCOPED_TRACE(std::string(std::is_same_v<D, Bf16> ? "bf16" : "fp16") + " N " + std::to_string(kN) + " swizzle " +
               std::to_string(sm90::swizzle_span(kSwizzle)) + (kARegisters ? " A in registers" : "") +
               (kTransA ? " A MN-major" : "") + (kTransB ? " B MN-major" : ""));
  const Run run = run_gemm<D, kN, kSwizzle, kTransA, kTransB, kARegisters>(test_kernels::kPlantNone);
  int bad = 0;
  for (std::size_t i = 0; i < run.c.size(); ++i) {
    // Exact products summed in fp32: 32 roundings of at most 2^-24 each.
    const double bound = 32 * 0x1p-24 * run.magnitude[i] + 1e-30;
    if (!(std::abs(run.c[i] - run.reference[i]) <= bound) && ++bad <= 5) {
      ADD_FAILURE() << "C[" << i / kN << "][" << i % kN << "] = " << run.c[i] << ", fp64 " << run.reference[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(WgmmaEmuTest, TheGemmMatchesFp64InEverySwizzleModeAndOperandForm) {
  expect_matches_fp64<Bf16, 64, Swizzle::k128B, false, false, false>();
  expect_matches_fp64<Fp16, 64, Swizzle::k128B, false, false, false>();
  expect_matches_fp64<Bf16, 256, Swizzle::k64B, false, true, false>();
  expect_matches_fp64<Fp16, 24, Swizzle::k32B, false, false, false>();
  expect_matches_fp64<Bf16, 128, Swizzle::kNone, false, false, false>();
  expect_matches_fp64<Fp16, 64, Swizzle::k128B, true, true, false>();
  expect_matches_fp64<Bf16, 64, Swizzle::kNone, true, true, false>();
  expect_matches_fp64<Fp16, 8, Swizzle::k32B, true, true, false>();
  expect_matches_fp64<Bf16, 136, Swizzle::k64B, true, false, false>();
  expect_matches_fp64<Fp16, 128, Swizzle::k128B, false, false, true>();
  expect_matches_fp64<Bf16, 40, Swizzle::k32B, false, true, true>();
}

// 8-bit wgmma (k32, K-major): finite random bytes of the format; exact
// products (two 4-bit significands) summed in fp32.
// Entries of C [64 x cols] (fp32 sums over 64 terms) further from the fp64
// sum of term(m, n, k), k < 64, than fp32 accumulation allows; the first
// three reported as failures when `report`.
template <class Term>
int fp32_sum_errors(const std::vector<float>& c, int cols, const Term& term, bool report) {
  int bad = 0;
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < cols; ++n) {
      double want = 0;
      double magnitude = 0;
      for (int k = 0; k < 64; ++k) {
        const double p = term(m, n, k);
        want += p;
        magnitude += std::abs(p);
      }
      const float got = c[static_cast<std::size_t>(m * cols + n)];
      if (!(std::abs(got - want) <= 64 * 0x1p-24 * magnitude + 1e-30) && ++bad <= 3 && report) {
        ADD_FAILURE() << "C[" << m << "][" << n << "] = " << got << ", fp64 " << want;
      }
    }
  }
  return bad;
}

template <Fp8 F, i32 kN, Swizzle kSwizzle, bool kARegisters>
void expect_fp8_matches_fp64(bool wrong_fragment = false) {
  SCOPED_TRACE(std::string(F == Fp8::kE4M3 ? "e4m3" : "e5m2") + " N " + std::to_string(kN) + " swizzle " +
               std::to_string(sm90::swizzle_span(kSwizzle)) + (kARegisters ? " A in registers" : ""));
  std::mt19937 rng(kN * 11 + static_cast<int>(kSwizzle));
  const std::vector<u8> a = testing::finite_fp8_bytes<F>(64 * 64, rng);
  const std::vector<u8> bt = testing::finite_fp8_bytes<F>(static_cast<std::size_t>(kN * 64), rng);
  std::vector<float> c(static_cast<std::size_t>(64 * kN), -1.0F);
  emu::Emulator emulator;
  emulator.register_buffer("a", a.data(), a.size());
  emulator.register_buffer("bt", bt.data(), bt.size());
  emulator.register_buffer("c", c.data(), c.size() * 4);
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::fp8_gemm_shared_bytes<kN, kSwizzle>()};
  emulator.launch(&test_kernels::wgmma_fp8_gemm<F, kN, kSwizzle, kARegisters>, config,
                  test_kernels::Fp8GemmParams{a.data(), bt.data(), c.data()});
  // wrong_fragment: the check itself reads A with the 16-bit A layout's
  // columns, which must not match (the test can fail).
  const int bad = fp32_sum_errors(
      c, kN,
      [&](int m, int n, int k) {
        const int ka = wrong_fragment ? (k / 2) * 2 + (1 - k % 2) : k;
        return static_cast<double>(fp8_to_float(a[static_cast<std::size_t>(m * 64 + ka)], F)) *
               fp8_to_float(bt[static_cast<std::size_t>(n * 64 + k)], F);
      },
      !wrong_fragment);
  if (wrong_fragment) {
    EXPECT_GT(bad, 0) << "a swapped K order matched too";
  } else {
    EXPECT_EQ(bad, 0);
  }
}

TEST(WgmmaEmuTest, Fp8GemmMatchesFp64InEverySwizzleModeAndOperandForm) {
  expect_fp8_matches_fp64<Fp8::kE4M3, 64, Swizzle::k128B, false>();
  expect_fp8_matches_fp64<Fp8::kE4M3, 128, Swizzle::k64B, true>();
  expect_fp8_matches_fp64<Fp8::kE5M2, 24, Swizzle::k32B, false>();
  expect_fp8_matches_fp64<Fp8::kE5M2, 32, Swizzle::kNone, true>();
  expect_fp8_matches_fp64<Fp8::kE4M3, 256, Swizzle::kNone, false>();
  expect_fp8_matches_fp64<Fp8::kE4M3, 64, Swizzle::k128B, true>(/*wrong_fragment=*/true);
}

// P V of the fp8 forward: P packed from the S accumulators as they are
// (sm90_fp8::pack_p_fp8), V's keys in the slots p_key gives; with V's keys in
// their own order (the planted bug) the same P is wrong.
template <Fp8 F, i32 kN, bool kPermute>
int fp8_pv_errors() {
  std::mt19937 rng(kN + (kPermute ? 1 : 0));
  std::uniform_real_distribution<float> prob(0.0F, 1.0F);
  std::vector<float> pm(64 * 64);
  for (float& x : pm) x = prob(rng);
  const std::vector<u8> v = testing::finite_fp8_bytes<F>(static_cast<std::size_t>(64 * kN), rng);
  std::vector<float> c(static_cast<std::size_t>(64 * kN), -1.0F);
  emu::Emulator emulator;
  emulator.register_buffer("p", pm.data(), pm.size() * 4);
  emulator.register_buffer("v", v.data(), v.size());
  emulator.register_buffer("c", c.data(), c.size() * 4);
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::fp8_pv_shared_bytes<kN>()};
  emulator.launch(&test_kernels::wgmma_fp8_pv<F, kN, kPermute>, config,
                  test_kernels::Fp8PvParams{pm.data(), v.data(), c.data()});
  return fp32_sum_errors(
      c, kN,
      [&](int m, int n, int k) {
        const double pk = fp8_to_float(float_to_fp8_satfinite(pm[static_cast<std::size_t>(m * 64 + k)], F), F);
        return pk * fp8_to_float(v[static_cast<std::size_t>(k * kN + n)], F);
      },
      false);
}

TEST(WgmmaEmuTest, Fp8PvTakesPFromTheAccumulatorsWithoutAnExchange) {
  EXPECT_EQ((fp8_pv_errors<Fp8::kE4M3, 128, true>()), 0);
  EXPECT_EQ((fp8_pv_errors<Fp8::kE5M2, 64, true>()), 0);
  EXPECT_GT((fp8_pv_errors<Fp8::kE4M3, 128, false>()), 1000) << "V in key order passed: the check cannot fail";
  // p_key is a permutation of each 32-key step.
  std::vector<int> seen(32, 0);
  for (int c = 0; c < 32; ++c) ++seen[static_cast<std::size_t>(sm90_fp8::p_key(c))];
  EXPECT_EQ(seen, std::vector<int>(32, 1));
}

// stmatrix.x4: lane l holds in register m row l / 4, columns 2 (l % 4) and
// + 1 of matrix m, and gives the address of row l % 8 of matrix l / 8 (here
// 16-byte slots in reverse lane order): every row lands whole where its
// lane pointed, gathered from the four lanes that hold it.
u16 stm_value(i32 m, i32 r, i32 c) { return static_cast<u16>(1000 * m + 10 * r + c); }

struct StmatrixParams {
  u16* out;
  i32 trans;
};

ATTUNE_KERNEL void stmatrix_kernel(StmatrixParams p) {
  unsigned char* smem = dev::shared_memory<unsigned char>();
  const i32 lane = dev::lane_id();
  u32 r[4];
  for (i32 m = 0; m < 4; ++m) {
    r[m] = static_cast<u32>(stm_value(m, lane / 4, 2 * (lane % 4))) |
           static_cast<u32>(stm_value(m, lane / 4, 2 * (lane % 4) + 1)) << 16;
  }
  if (p.trans != 0) {
    dev::stmatrix_x4_trans(smem + 16 * (31 - lane), r);
  } else {
    dev::stmatrix_x4(smem + 16 * (31 - lane), r);
  }
  dev::block::sync();
  for (i32 i = lane; i < 256; i += 32)
    dev::store_global(p.out + i, dev::load_shared(dev::shared_as<const u16>(smem) + i));
}

// Lane l's address takes row l % 8 of matrix l / 8: of the fragment's
// matrix as it is, or (.trans) its column l % 8.
TEST(WgmmaEmuTest, StmatrixStoresEachRowWhereItsLanePoints) {
  for (const i32 trans : {0, 1}) {
    std::vector<u16> out(256, 0xFFFF);
    emu::Emulator emulator;
    emulator.register_buffer("out", out.data(), out.size() * 2);
    emulator.launch(&stmatrix_kernel, LaunchConfig{{1, 1, 1}, {32, 1, 1}, 512}, StmatrixParams{out.data(), trans});
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 8; ++j) {
        const u16 want = trans != 0 ? stm_value(lane / 8, j, lane % 8) : stm_value(lane / 8, lane % 8, j);
        EXPECT_EQ(out[static_cast<std::size_t>((31 - lane) * 8 + j)], want)
            << "slot " << 31 - lane << ", element " << j << (trans != 0 ? ", .trans" : "");
      }
    }
  }
}

using Planted = testing::PlantedBug;

class WgmmaPlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(WgmmaPlantedBugTest, IsReportedWithItsKindAtItsLine) {
  const Planted& p = GetParam();
  testing::expect_planted_bug_reported(p, "wgmma_gemm.cuh",
                                       [&] { run_gemm<Bf16, 64, Swizzle::k128B, false, false, false>(p.plant); });
}

INSTANTIATE_TEST_SUITE_P(
    Detectors, WgmmaPlantedBugTest,
    ::testing::Values(Planted{test_kernels::kPlantNoProxyFence, BugKind::kAsyncProxyOrder, "wgmma: issue (shared)",
                              "no fence.proxy.async", "NoProxyFence"},
                      Planted{test_kernels::kPlantNoWgmmaFence, BugKind::kWgmmaOperandInFlight, "wgmma: issue (shared)",
                              "without a wgmma::fence", "NoWgmmaFence"},
                      Planted{test_kernels::kPlantAccumulatorWritten, BugKind::kWgmmaOperandInFlight, "wgmma: wait",
                              "were written while it was in flight", "AccumulatorWritten"},
                      Planted{test_kernels::kPlantOperandOverwritten, BugKind::kAsyncProxyOrder,
                              "planted: operand overwritten", "operand of a wgmma still in flight",
                              "OperandOverwritten"},
                      Planted{test_kernels::kPlantDivergentDescriptor, BugKind::kWgmmaDivergence,
                              "wgmma: issue (shared)", "while thread 0 issues", "DivergentDescriptor"},
                      Planted{test_kernels::kPlantIllegalRegisterCount, BugKind::kIllegalRegisterCount,
                              "planted: illegal count", "setmaxnreg.inc 100", "IllegalRegisterCount"},
                      Planted{test_kernels::kPlantAccumulatorRead, BugKind::kWgmmaOperandInFlight,
                              "planted: read in flight", "it was read before the wgmma::wait", "AccumulatorRead"},
                      Planted{test_kernels::kPlantWarpSkipsWgmma, BugKind::kWgmmaDivergence, "wgmma: wait",
                              "not every thread of the warpgroup executes the wgmma", "WarpSkipsWgmma"}),
    testing::planted_bug_name);

}  // namespace
}  // namespace attune
