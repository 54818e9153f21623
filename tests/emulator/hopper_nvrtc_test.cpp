// Hopper's CUDA primitives (templates/primitives/hopper_cuda.h) compile with
// NVRTC for sm_90a into the instructions they exist for: every wgmma N from 8
// to 256 in both dtypes and all three forms (HGMMA), TMA loads and stores of
// 2 to 5 dimensions (UTMALDG, UTMASTG), mbarriers (SYNCS), setmaxnreg
// (USETMAXREG), elect.sync, tensor-map prefetch; no kernel spills. The
// compile refuses a kernel whose ptxas log reports a silent slowdown (two
// planted ones), and sm_80 builds cannot include the header.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "profile/sass.h"
#include "runtime/jit/nvrtc_compiler.h"

namespace attune {
namespace {

constexpr const char* kHopperSource = R"cuda(
#include "templates/primitives/hopper_cuda.h"

namespace attune {
using namespace attune::dev;

// The three forms of one N: A and B K-major from shared memory, both
// MN-major, and A from registers; the accumulators stored after the wait.
template <class D, i32 N>
ATTUNE_KERNEL void __launch_bounds__(128, 1) wgmma_n(u32 a_bits, float* out) {
  __shared__ alignas(1024) unsigned char tile[32768];
  float d[N / 2];
  const u32 a[4] = {a_bits, a_bits + 1, a_bits + 2, a_bits + 3};
  const u64 desc_a = wgmma::descriptor(tile, 16, 1024, sm90::Swizzle::k128B);
  const u64 desc_b = wgmma::descriptor(tile + 8192, 8192, 1024, sm90::Swizzle::k64B);
  wgmma::fence();
  wgmma::mma_ss<D, N, 0, 0>(d, desc_a, desc_b, 0);
  wgmma::mma_ss<D, N, 1, 1>(d, desc_a, desc_b, 1);
  wgmma::mma_rs<D, N, 1>(d, a, desc_b, 1);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(d);
  for (i32 i = 0; i < N / 2; ++i) out[warpgroup::thread() * (N / 2) + i] = d[i];
}
#define X(N) template __global__ void wgmma_n<Fp16, N>(u32, float*); template __global__ void wgmma_n<Bf16, N>(u32, float*);
X(8) X(16) X(24) X(32) X(40) X(48) X(56) X(64) X(72) X(80) X(88) X(96) X(104) X(112) X(120) X(128) X(136) X(144) X(152) X(160) X(168) X(176) X(184) X(192) X(200) X(208) X(216) X(224) X(232) X(240) X(248) X(256)
#undef X

// A producer warpgroup loads tiles through TMA onto an mbarrier and stores
// one back; a consumer warpgroup waits on the phase, hands off through a
// named barrier, and gives its registers back and forth.
ATTUNE_KERNEL void __launch_bounds__(256, 1) async_copies(const __grid_constant__ TensorMap map2,
                                                          const __grid_constant__ TensorMap map3,
                                                          const __grid_constant__ TensorMap map4,
                                                          const __grid_constant__ TensorMap map5, i32 x, float* out) {
  __shared__ alignas(1024) unsigned char tile[4 * 8192];
  __shared__ u64 full;
  if (linear_thread() == 0) {
    mbarrier::init(&full, 1);
    mbarrier::fence_init();
  }
  block::sync();
  if (warpgroup::index() == 0) {
    registers::decrease<40>();
    if (warp_id() == 0 && elect_one()) {
      tma::prefetch(&map2);
      mbarrier::expect_tx(&full, 4096);
      mbarrier::arrive_expect_tx(&full, 4 * 8192 - 4096);
      tma::load(tile, &map2, &full, x, 0);
      tma::load(tile + 8192, &map3, &full, x, 0, 1);
      tma::load(tile + 16384, &map4, &full, x, 0, 1, 2);
      tma::load(tile + 24576, &map5, &full, x, 0, 1, 2, 3);
    }
  } else {
    registers::increase<232>();
    if (warp_id() == 4) {
      while (!mbarrier::try_wait(&full, 0)) {
      }
    }
    named_barrier::sync(1, 128);
    mbarrier::wait(&full, 0);
    out[linear_thread()] = reinterpret_cast<const float*>(tile)[linear_thread()];
    const u32 fragment[4] = {static_cast<u32>(linear_thread()), 1U, 2U, 3U};
    stmatrix_x4(tile + 16 * lane_id(), fragment);
    fence_proxy_async();
    named_barrier::arrive(2, 128);
    if (warp_id() == 4 && elect_one()) {
      tma::store(&map2, tile, x, 0);
      tma::store(&map3, tile + 8192, x, 0, 1);
      tma::store(&map4, tile + 16384, x, 0, 1, 2);
      tma::store(&map5, tile + 24576, x, 0, 1, 2, 3);
      tma::commit();
      tma::wait_read<0>();
      mbarrier::invalidate(&full);
    }
  }
}
}  // namespace attune
)cuda";

// Planted: setmaxnreg in a kernel without a register cap at entry (C7508).
constexpr const char* kIgnoredSetmaxnreg = R"cuda(
#include "templates/primitives/hopper_cuda.h"
namespace attune {
ATTUNE_KERNEL void uncapped(float* out) {
  dev::registers::increase<232>();
  out[dev::linear_thread()] = 1.0f;
}
}  // namespace attune
)cuda";

// Planted: accumulators indexed at run time while their wgmma is in flight:
// ptxas serializes every wgmma (C7511).
constexpr const char* kSerializedWgmma = R"cuda(
#include "templates/primitives/hopper_cuda.h"
namespace attune {
ATTUNE_KERNEL void __launch_bounds__(128, 1) serialized(float* out, i32 n) {
  __shared__ alignas(1024) unsigned char tile[16384];
  float d[32] = {};
  for (i32 j = 0; j < n; ++j) {
    dev::wgmma::fence();
    dev::wgmma::mma_ss<Bf16, 64, 0, 0>(d, dev::wgmma::descriptor(tile, 16, 1024, sm90::Swizzle::k128B),
                                       dev::wgmma::descriptor(tile + 8192, 16, 1024, sm90::Swizzle::k128B), 1);
    dev::wgmma::commit();
    d[j % 32] += 1.0f;
    dev::wgmma::wait<0>();
  }
  for (i32 i = 0; i < 32; ++i) out[dev::linear_thread() * 32 + i] = d[i];
}
}  // namespace attune
)cuda";

std::vector<std::string> include_source_dir() { return {std::string("-I") + ATTUNE_SOURCE_DIR}; }

// The instruction mix of a compile's cubin; the reason when nvdisasm is missing.
std::string sass_mix(const CompileResult& r, profile::SassMix* mix) {
  try {
    *mix = profile::count_sass(profile::disassemble(r.cubin));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HopperNvrtcTest, EveryPrimitiveCompilesToItsInstructionsWithoutSpills) {
  const CompileResult r = compile_with_nvrtc(kHopperSource, "hopper.cu", "attune::wgmma_n<attune::Bf16, 64>", "sm_90a",
                                             include_source_dir());
  ASSERT_TRUE(r.ok) << r.log;
  int kernels = 0;
  for (std::size_t at = r.log.find("bytes spill stores"); at != std::string::npos;
       at = r.log.find("bytes spill stores", at + 1)) {
    ++kernels;
    const std::size_t line = r.log.rfind('\n', at);
    const std::string text = r.log.substr(line + 1, r.log.find('\n', at) - line - 1);
    EXPECT_NE(text.find(" 0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << text;
  }
  EXPECT_EQ(kernels, 65) << "64 wgmma kernels and async_copies";
  profile::SassMix mix;
  if (const std::string why = sass_mix(r, &mix); !why.empty()) GTEST_SKIP() << why;
  const auto count = [&](const char* op) { return mix.contains(op) ? mix.at(op) : 0; };
  EXPECT_EQ(count("HGMMA"), 3 * 64) << "3 forms x 32 N x 2 dtypes";
  EXPECT_EQ(count("UTMALDG"), 4) << "2-D to 5-D loads";
  EXPECT_EQ(count("UTMASTG"), 4) << "2-D to 5-D stores";
  EXPECT_GE(count("SYNCS"), 3) << "mbarrier arrive, expect-tx and waits";
  EXPECT_EQ(count("USETMAXREG"), 2);
  EXPECT_GE(count("ELECT"), 1);
  EXPECT_EQ(count("UTMACCTL"), 1) << "tensor-map prefetch";
  EXPECT_EQ(count("STSM"), 1) << "stmatrix.x4";
  EXPECT_GE(count("WARPGROUP"), 64) << "wgmma.fence and wait_group";
  std::cout << "HGMMA " << count("HGMMA") << ", UTMALDG " << count("UTMALDG") << ", UTMASTG " << count("UTMASTG")
            << ", SYNCS " << count("SYNCS") << ", USETMAXREG " << count("USETMAXREG") << " in " << r.seconds << " s\n";
}

TEST(HopperNvrtcTest, ASlowdownPtxasReportsFailsTheCompileWithItsMessage) {
  const CompileResult ignored =
      compile_with_nvrtc(kIgnoredSetmaxnreg, "uncapped.cu", "attune::uncapped", "sm_90a", include_source_dir());
  EXPECT_FALSE(ignored.ok);
  EXPECT_TRUE(ignored.cubin.empty());
  EXPECT_NE(ignored.log.find("refused: ptxas reports a slowdown"), std::string::npos) << ignored.log;
  EXPECT_NE(ignored.log.find("(C7508) Potential Performance Loss: 'setmaxnreg' ignored"), std::string::npos)
      << ignored.log;
  const CompileResult serialized =
      compile_with_nvrtc(kSerializedWgmma, "serialized.cu", "attune::serialized", "sm_90a", include_source_dir());
  EXPECT_FALSE(serialized.ok);
  EXPECT_NE(serialized.log.find("(C7511)"), std::string::npos) << serialized.log;
  EXPECT_NE(serialized.log.find("wgmma.mma_async instructions are serialized"), std::string::npos) << serialized.log;
}

// The GEMM the emulator tests (wgmma_gemm.cuh) is the same template on the
// GPU: it compiles for sm_90a into HGMMA, shared and register A alike.
TEST(HopperNvrtcTest, TheEmulatorsGemmCompilesToHgmma) {
  const std::string source = R"cuda(
#include "tests/emulator/wgmma_gemm.cuh"
namespace attune::test_kernels {
template __global__ void wgmma_gemm<Bf16, 64, sm90::Swizzle::k128B, false, false, false>(GemmParams);
template __global__ void wgmma_gemm<Fp16, 256, sm90::Swizzle::k64B, true, true, false>(GemmParams);
template __global__ void wgmma_gemm<Bf16, 128, sm90::Swizzle::kNone, false, false, true>(GemmParams);
}  // namespace attune::test_kernels
)cuda";
  const CompileResult r =
      compile_with_nvrtc(source, "wgmma_gemm.cu",
                         "attune::test_kernels::wgmma_gemm<attune::Bf16, 64, attune::sm90::Swizzle::k128B, false, "
                         "false, false>",
                         "sm_90a", include_source_dir());
  ASSERT_TRUE(r.ok) << r.log;
  profile::SassMix mix;
  if (const std::string why = sass_mix(r, &mix); !why.empty()) GTEST_SKIP() << why;
  // Two K steps in each of three kernels; the planted branches (a warp that
  // skips its wgmmas) may give the compiler a second copy of the loop.
  EXPECT_GE(mix.contains("HGMMA") ? mix.at("HGMMA") : 0, 6) << "two K steps in each of three kernels";
  EXPECT_FALSE(mix.contains("HMMA")) << "no mma.sync fallback";
}

// The 8-bit GEMM (wgmma_fp8_gemm.cuh) and the fp8 P V (wgmma_fp8_pv.cuh)
// compile for sm_90a into QGMMA, the fp8 form FlashAttention-3's e4m3
// kernels use, shared and register A alike, P packed by F2FP.
TEST(HopperNvrtcTest, TheEmulatorsFp8GemmCompilesToQgmma) {
  const std::string source = R"cuda(
#include "tests/emulator/wgmma_fp8_gemm.cuh"
namespace attune::test_kernels {
template __global__ void wgmma_fp8_gemm<Fp8::kE4M3, 64, sm90::Swizzle::k128B, false>(Fp8GemmParams);
template __global__ void wgmma_fp8_gemm<Fp8::kE5M2, 128, sm90::Swizzle::k64B, true>(Fp8GemmParams);
}  // namespace attune::test_kernels
#include "tests/emulator/wgmma_fp8_pv.cuh"
namespace attune::test_kernels {
template __global__ void wgmma_fp8_pv<Fp8::kE4M3, 128, true>(Fp8PvParams);
}  // namespace attune::test_kernels
)cuda";
  const CompileResult r = compile_with_nvrtc(
      source, "wgmma_fp8_gemm.cu",
      "attune::test_kernels::wgmma_fp8_gemm<attune::Fp8::kE4M3, 64, attune::sm90::Swizzle::k128B, false>", "sm_90a",
      include_source_dir());
  ASSERT_TRUE(r.ok) << r.log;
  for (const char* ptx : {"m64n64k32.f32.e4m3.e4m3", "m64n128k32.f32.e5m2.e5m2"}) {
    EXPECT_NE(r.ptx.find(ptx), std::string::npos) << ptx << " missing from the PTX";
  }
  profile::SassMix mix;
  if (const std::string why = sass_mix(r, &mix); !why.empty()) GTEST_SKIP() << why;
  EXPECT_GE(mix.contains("QGMMA") ? mix.at("QGMMA") : 0, 6) << "two K steps in each of three kernels";
  EXPECT_TRUE(mix.contains("F2FP")) << "P packed to e4m3 by F2FP";
  EXPECT_FALSE(mix.contains("HGMMA")) << "no 16-bit wgmma";
}

// The warp-specialized GEMM of tma_test (TMA producer, wgmma consumers,
// setmaxnreg) compiles for sm_90a with no slowdown ptxas would report, no
// spill, and the instructions it exists for.
TEST(HopperNvrtcTest, TheWarpSpecializedGemmCompilesWithoutSlowdowns) {
  const std::string source = R"cuda(
#include "tests/emulator/tma_gemm.cuh"
namespace attune::test_kernels {
template __global__ void tma_gemm<Bf16, 64, sm90::Swizzle::k128B, 2>(const __grid_constant__ TmaGemmParams);
template __global__ void tma_gemm<Fp16, 256, sm90::Swizzle::k32B, 2>(const __grid_constant__ TmaGemmParams);
}  // namespace attune::test_kernels
)cuda";
  const CompileResult r = compile_with_nvrtc(
      source, "tma_gemm.cu", "attune::test_kernels::tma_gemm<attune::Bf16, 64, attune::sm90::Swizzle::k128B, 2>",
      "sm_90a", include_source_dir());
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_EQ(r.spill_bytes, 0) << r.log;
  profile::SassMix mix;
  if (const std::string why = sass_mix(r, &mix); !why.empty()) GTEST_SKIP() << why;
  for (const char* op : {"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "ELECT"}) {
    EXPECT_TRUE(mix.contains(op)) << op << " missing from the SASS";
  }
}

// A bounded wait (-DATTUNE_WAIT_BOUND_MS, core/device_checks.h) compiles for
// sm_90a into a timed spin that traps, with the global the runtime points at
// host-mapped memory; without the define the spin is the plain one and
// neither the trap nor the global exists.
TEST(HopperNvrtcTest, ABoundedWaitTrapsAndExportsItsReportSlot) {
  const std::string source = R"cuda(
#include "templates/primitives/hopper.h"
namespace attune {
ATTUNE_KERNEL void waits(u32 parity, u32* out) {
  __shared__ u64 bar;
  if (dev::linear_thread() == 0) dev::mbarrier::init(&bar, 1);
  dev::block::sync();
  dev::mbarrier::wait(&bar, parity);
  out[dev::linear_thread()] = 1;
}
}  // namespace attune
)cuda";
  std::vector<std::string> bounded = include_source_dir();
  bounded.push_back("-DATTUNE_WAIT_BOUND_MS=50");
  const CompileResult with = compile_with_nvrtc(source, "waits.cu", "attune::waits", "sm_90a", bounded);
  ASSERT_TRUE(with.ok) << with.log;
  const CompileResult without = compile_with_nvrtc(source, "waits.cu", "attune::waits", "sm_90a", include_source_dir());
  ASSERT_TRUE(without.ok) << without.log;
  const auto holds = [](const std::vector<char>& cubin, std::string_view text) {
    return std::string_view(cubin.data(), cubin.size()).find(text) != std::string_view::npos;
  };
  EXPECT_TRUE(holds(with.cubin, "attune_wait_report")) << "the report slot is not a symbol of the cubin";
  EXPECT_FALSE(holds(without.cubin, "attune_wait_report"));
  profile::SassMix bounded_mix;
  profile::SassMix plain_mix;
  if (const std::string why = sass_mix(with, &bounded_mix); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(sass_mix(without, &plain_mix), "");
  const auto count = [](const profile::SassMix& mix, const char* op) { return mix.contains(op) ? mix.at(op) : 0; };
  EXPECT_GE(count(bounded_mix, "BPT"), 1) << "no trap in the bounded wait";
  EXPECT_EQ(count(plain_mix, "BPT"), 0) << "a trap in the plain wait";
  EXPECT_GE(count(bounded_mix, "SYNCS"), 1);
}

TEST(HopperNvrtcTest, Sm80BuildsCannotIncludeTheHopperPrimitives) {
  const CompileResult r =
      compile_with_nvrtc(kIgnoredSetmaxnreg, "uncapped.cu", "attune::uncapped", "sm_80", include_source_dir());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("wgmma and setmaxnreg need sm_90a"), std::string::npos) << r.log;
}

TEST(HopperNvrtcTest, OnlyTheListedPtxasCodesCountAsSlowdowns) {
  EXPECT_EQ(slow_ptxas_message("ptxas info    : Used 168 registers\nptxas info    : (C7519) warpgroup.arrive is "
                               "injected"),
            "");
  EXPECT_EQ(slow_ptxas_message("a\nptxas info    : (C7515) Potential Performance Loss: wgmma serialized\nb"),
            "ptxas info    : (C7515) Potential Performance Loss: wgmma serialized");
  EXPECT_NE(slow_ptxas_message("ptxas info : (C7510) x"), "");
  EXPECT_EQ(slow_ptxas_message("ptxas info : (C7512) x"), "");
}

}  // namespace
}  // namespace attune
