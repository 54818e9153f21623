// Hopper's primitives on the hardware next to the emulator on the same
// inputs: the first thing a lent H100/H200 checks (tools/gpu_check, step
// primitives). Each test runs its probe on the emulator first and checks it
// against what the ISA says (so this half runs in CI), then, with a GPU of
// compute capability 9.0, compiles the same template with NVRTC for sm_90a
// and compares what the hardware recorded with the emulator's record:
//
//   mbarrier parity     try_wait of both parities, fresh and after 4 phases
//   TMA 128B swizzle    the shared bytes a swizzled load leaves, and a TMA store back
//   wgmma forms         shared K-major, shared MN-major, A from registers
//   warp-specialized    TMA ring with full/empty mbarriers, named barriers,
//                       setmaxnreg, wgmma, a TMA store (tma_gemm.cuh)
//   bounded wait        (HopperWaitBoundGpuTest, its own process: it loses the
//                       context) a phase that never completes traps and names
//                       its barrier when built with ATTUNE_WAIT_BOUND_MS
//
// The kernels' source is read at run time from $ATTUNE_SOURCE_DIR (the
// repository; tools/gpu_check sets it), so no path of the building machine
// is in the binary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor_map.h"
#include "emulator/emulator.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "tests/emulator/element_bits.h"
#include "tests/emulator/hopper_probes.cuh"
#include "tests/emulator/tma_gemm.cuh"
#include "tests/emulator/tma_gemm_maps.h"
#include "tests/emulator/wgmma_fp8_gemm.cuh"
#include "tests/emulator/wgmma_gemm.cuh"
#include "tests/support/swizzled_tile_map.h"

namespace attune {
namespace {

using cuda::DeviceBuffers;
using cuda::Driver;
using sm90::Swizzle;

// Empty when a GPU half can run; else why not.
std::string gpu_unavailable() {
  std::string why;
  if (!Driver::available(&why)) return why;
  const auto devices = Driver::get().devices();
  if (devices.empty()) return "the CUDA driver sees no device";
  if (devices[0].arch() != "sm_90a") return "device 0 is " + devices[0].arch() + ", not sm_90a";
  const char* dir = std::getenv("ATTUNE_SOURCE_DIR");
  if (dir == nullptr || *dir == '\0') return "ATTUNE_SOURCE_DIR (the repository, for the kernels' source) is not set";
  return "";
}

// A test kernel compiled for sm_90a and looked up (options: extra -D).
Driver::Function load_kernel(const std::string& header, const std::string& instantiation, const std::string& expression,
                             std::vector<std::string> options = {}) {
  options.push_back(std::string("-I") + std::getenv("ATTUNE_SOURCE_DIR"));
  const std::string source =
      "#include \"" + header + "\"\nnamespace attune::test_kernels {\n" + instantiation + "\n}\n";
  const CompileResult r = compile_with_nvrtc(source, "probe.cu", expression, "sm_90a", options);
  if (!r.ok) throw Error("NVRTC: " + r.log);
  Driver& driver = Driver::get();
  return driver.function(driver.load_module(0, r.cubin), r.lowered_name);
}

template <class Params>
void launch_on_gpu(const Driver::Function& f, const LaunchConfig& config, const Params& params) {
  Driver& driver = Driver::get();
  if (config.dynamic_shared_bytes > 48 * 1024)
    driver.set_max_dynamic_shared(f, static_cast<int>(config.dynamic_shared_bytes));
  driver.launch(f, config, &params, sizeof(params), nullptr);
  driver.synchronize(nullptr);
}

// -- mbarrier parity ----------------------------------------------------------

constexpr int kPhases = 4;

TEST(HopperGpuTest, MbarrierParityRoundTripMatchesTheEmulator) {
  const LaunchConfig config{{1, 1, 1}, {64, 1, 1}, 16};
  std::vector<u32> emu_out(2 + 2 * kPhases + 1, 7);
  {
    emu::Emulator emulator;
    emulator.register_buffer("out", emu_out.data(), emu_out.size() * 4);
    emulator.launch(&test_kernels::mbarrier_probe<kPhases>, config, test_kernels::MbarrierProbeParams{emu_out.data()});
  }
  // The ISA: a fresh barrier's "previous" phase (parity 1) counts as complete,
  // as does each phase once all 64 arrived; the next phase does not (the
  // emulator's try_wait blocks, so those slots are ~0 there: not modelled).
  constexpr u32 kNotModelled = ~0U;
  std::vector<u32> want = {1, kNotModelled};
  for (int p = 0; p < kPhases; ++p) want.insert(want.end(), {1, kNotModelled});
  EXPECT_EQ(std::vector<u32>(emu_out.begin(), emu_out.end() - 1), want) << "the emulator's parity rule";
  if (const std::string why = gpu_unavailable(); !why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
  const auto f = load_kernel("tests/emulator/hopper_probes.cuh",
                             "template __global__ void mbarrier_probe<4>(MbarrierProbeParams);",
                             "attune::test_kernels::mbarrier_probe<4>");
  std::vector<u32> gpu_out(emu_out.size(), 7);
  DeviceBuffers d(Driver::get(), {{gpu_out.data(), gpu_out.size() * 4}});
  launch_on_gpu(f, config, test_kernels::MbarrierProbeParams{static_cast<u32*>(d.at(0))});
  Driver::get().copy_to_host(gpu_out.data(), d.at(0), gpu_out.size() * 4);
  std::cout << "GPU: barrier at shared address 0x" << std::hex << gpu_out.back() << std::dec << "\n";
  // Where the emulator models the result, the GPU agrees with it; the
  // incomplete phases are false on the GPU.
  for (std::size_t i = 0; i + 1 < gpu_out.size(); ++i) {
    const u32 expected = emu_out[i] == kNotModelled ? 0U : emu_out[i];
    EXPECT_EQ(gpu_out[i], expected) << "slot " << i
                                    << " of [fresh parity 1, fresh parity 0, then per phase: its parity, the next's]";
  }
}

// -- TMA, 128-byte swizzle ------------------------------------------------------

// One 64 x 64 tile, loaded and stored whole.
TensorMapSpec tile_map(const void* address) { return testing::swizzled_tile_map(address, 64, 64); }

TEST(HopperGpuTest, Tma128ByteSwizzledLoadAndStoreMatchTheEmulator) {
  std::vector<u16> in(64 * 64);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<u16>(i * 7 + 3);
  constexpr int kWords = test_kernels::kTmaProbeTileBytes / 4;
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::kTmaProbeSharedBytes};
  std::vector<u16> emu_tile(in.size(), 0);
  std::vector<u32> emu_raw(kWords + 1, 0);
  {
    test_kernels::TmaProbeParams p{};
    p.in = encode_emulated_tensor_map(tile_map(in.data()));
    p.out = encode_emulated_tensor_map(tile_map(emu_tile.data()));
    p.raw = emu_raw.data();
    emu::Emulator emulator;
    emulator.register_buffer("in", in.data(), in.size() * 2);
    emulator.register_buffer("out", emu_tile.data(), emu_tile.size() * 2);
    emulator.register_buffer("raw", emu_raw.data(), emu_raw.size() * 4);
    emulator.launch(&test_kernels::tma_probe<0>, config, p);
  }
  // The 128-byte swizzle: in row r (128 bytes), 16-byte chunk c lands at chunk c ^ (r % 8).
  int misplaced = 0;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 8; ++c) {
      for (int w = 0; w < 4; ++w) {
        const int at = r * 32 + (c ^ (r % 8)) * 4 + w;
        const u32 want =
            static_cast<u32>(in[r * 64 + c * 8 + 2 * w]) | (static_cast<u32>(in[r * 64 + c * 8 + 2 * w + 1]) << 16);
        if (emu_raw[at] != want && ++misplaced <= 3) ADD_FAILURE() << "emulator: row " << r << " chunk " << c;
      }
    }
  }
  EXPECT_EQ(misplaced, 0);
  EXPECT_EQ(emu_tile, in) << "the emulator's TMA store did not write the tile back";
  if (const std::string why = gpu_unavailable(); !why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
  Driver& driver = Driver::get();
  const auto f = load_kernel("tests/emulator/hopper_probes.cuh",
                             "template __global__ void tma_probe<0>(const __grid_constant__ TmaProbeParams);",
                             "attune::test_kernels::tma_probe<0>");
  std::vector<u16> gpu_tile(in.size(), 0);
  std::vector<u32> gpu_raw(emu_raw.size(), 0);
  DeviceBuffers d(
      driver,
      {{in.data(), in.size() * 2}, {gpu_tile.data(), gpu_tile.size() * 2}, {gpu_raw.data(), gpu_raw.size() * 4}});
  test_kernels::TmaProbeParams p{};
  p.in = driver.encode_tensor_map(tile_map(d.at(0)));
  p.out = driver.encode_tensor_map(tile_map(d.at(1)));
  p.raw = static_cast<u32*>(d.at(2));
  launch_on_gpu(f, config, p);
  driver.copy_to_host(gpu_tile.data(), d.at(1), gpu_tile.size() * 2);
  driver.copy_to_host(gpu_raw.data(), d.at(2), gpu_raw.size() * 4);
  std::cout << "GPU: tile at shared address 0x" << std::hex << gpu_raw.back() << std::dec << "\n";
  int differ = 0;
  for (int i = 0; i < kWords; ++i) {
    if (gpu_raw[i] != emu_raw[i] && ++differ <= 5) {
      ADD_FAILURE() << "shared word " << i << " (row " << i / 32 << ", chunk " << (i % 32) / 4 << "): GPU 0x"
                    << std::hex << gpu_raw[i] << ", emulator 0x" << emu_raw[i] << std::dec;
    }
  }
  EXPECT_EQ(differ, 0) << differ << " of " << kWords << " shared words differ (the swizzle model)";
  EXPECT_EQ(gpu_tile, in) << "the GPU's TMA store did not write the tile back";
}

// -- wgmma operand forms ----------------------------------------------------------

struct Gemm {
  std::vector<u16> a, b;
  std::vector<double> reference, magnitude;
};

template <class D, i32 kN>
Gemm gemm_inputs(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  Gemm g;
  g.a.resize(64 * 32);
  g.b.resize(static_cast<std::size_t>(32 * kN));
  for (u16& x : g.a) x = testing::bits_of<D>(dist(rng));
  for (u16& x : g.b) x = testing::bits_of<D>(dist(rng));
  g.reference.assign(static_cast<std::size_t>(64 * kN), 0.0);
  g.magnitude.assign(g.reference.size(), 0.0);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int k = 0; k < 32; ++k) {
        const double p = testing::value_of<D>(g.a[static_cast<std::size_t>(m * 32 + k)]) *
                         testing::value_of<D>(g.b[static_cast<std::size_t>(k * kN + n)]);
        g.reference[static_cast<std::size_t>(m * kN + n)] += p;
        g.magnitude[static_cast<std::size_t>(m * kN + n)] += std::abs(p);
      }
    }
  }
  return g;
}

// Elements of `got` off `want` by more than `ulps` x 2^-24 x the products' magnitude.
int count_off(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& magnitude,
              double ulps, const std::string& what, int columns) {
  int off = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = ulps * 0x1p-24 * magnitude[i] + 1e-30;
    if (!(std::abs(got[i] - want[i]) <= bound) && ++off <= 4) {
      ADD_FAILURE() << what << ": C[" << i / columns << "][" << i % columns << "] = " << got[i] << ", want " << want[i];
    }
  }
  return off;
}

template <class D, i32 kN, Swizzle kSwizzle, bool kTransA, bool kTransB, bool kARegisters>
void wgmma_form(const std::string& name, const std::string& why_no_gpu) {
  SCOPED_TRACE(name);
  const Gemm g = gemm_inputs<D, kN>(kN + static_cast<unsigned>(kSwizzle));
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::gemm_shared_bytes<kN, kSwizzle, kTransA, kTransB>()};
  std::vector<float> emu_c(g.reference.size(), -1.0F);
  {
    emu::Emulator emulator;
    emulator.register_buffer("a", g.a.data(), g.a.size() * 2);
    emulator.register_buffer("b", g.b.data(), g.b.size() * 2);
    emulator.register_buffer("c", emu_c.data(), emu_c.size() * 4);
    emulator.launch(&test_kernels::wgmma_gemm<D, kN, kSwizzle, kTransA, kTransB, kARegisters>, config,
                    test_kernels::GemmParams{g.a.data(), g.b.data(), emu_c.data(), test_kernels::kPlantNone});
  }
  EXPECT_EQ(count_off(emu_c, g.reference, g.magnitude, 32, "emulator", kN), 0);
  if (!why_no_gpu.empty()) return;
  const char* swizzle = kSwizzle == Swizzle::k128B  ? "k128B"
                        : kSwizzle == Swizzle::k64B ? "k64B"
                        : kSwizzle == Swizzle::k32B ? "k32B"
                                                    : "kNone";
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  const std::string tail = std::to_string(kN) + ", attune::sm90::Swizzle::" + swizzle + ", " + flag(kTransA) + ", " +
                           flag(kTransB) + ", " + flag(kARegisters);
  const std::string args = std::string(std::is_same_v<D, Bf16> ? "attune::Bf16" : "attune::Fp16") + ", " + tail;
  const auto f =
      load_kernel("tests/emulator/wgmma_gemm.cuh", "template __global__ void wgmma_gemm<" + args + ">(GemmParams);",
                  "attune::test_kernels::wgmma_gemm<" + args + ">");
  std::vector<float> gpu_c(emu_c.size(), -1.0F);
  Driver& driver = Driver::get();
  DeviceBuffers d(driver,
                  {{g.a.data(), g.a.size() * 2}, {g.b.data(), g.b.size() * 2}, {gpu_c.data(), gpu_c.size() * 4}});
  launch_on_gpu(f, config,
                test_kernels::GemmParams{static_cast<const u16*>(d.at(0)), static_cast<const u16*>(d.at(1)),
                                         static_cast<float*>(d.at(2)), test_kernels::kPlantNone});
  driver.copy_to_host(gpu_c.data(), d.at(2), gpu_c.size() * 4);
  std::vector<double> emu_as_want(emu_c.begin(), emu_c.end());
  // The tensor cores may add in another order and round differently: a few ulps
  // of the products' magnitude; a layout or descriptor bug is off by the magnitude.
  EXPECT_EQ(count_off(gpu_c, emu_as_want, g.magnitude, 64, "GPU against the emulator", kN), 0);
}

TEST(HopperGpuTest, WgmmaEveryOperandFormMatchesTheEmulator) {
  const std::string why = gpu_unavailable();
  wgmma_form<Bf16, 64, Swizzle::k128B, false, false, false>("SS K-major, 128B swizzle, bf16", why);
  wgmma_form<Fp16, 64, Swizzle::k64B, true, true, false>("SS MN-major, 64B swizzle, fp16", why);
  wgmma_form<Bf16, 128, Swizzle::k128B, false, false, true>("RS (A in registers), 128B swizzle, bf16", why);
  if (!why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
}

// 8-bit wgmma (k32, K-major): the emulator's fragment and operand layouts
// for e4m3 and e5m2 against the tensor cores' (the register A layout,
// sm90::a8_fragment_col, is the premise the fp8 forward's P rests on).
template <Fp8 F, i32 kN, Swizzle kSwizzle, bool kARegisters>
void fp8_wgmma_form(const std::string& name, const std::string& why_no_gpu) {
  SCOPED_TRACE(name);
  std::mt19937 rng(kN * 3 + static_cast<unsigned>(kSwizzle));
  const std::vector<u8> a = testing::finite_fp8_bytes<F>(64 * 64, rng);
  const std::vector<u8> bt = testing::finite_fp8_bytes<F>(static_cast<std::size_t>(kN * 64), rng);
  std::vector<double> reference(static_cast<std::size_t>(64 * kN), 0.0), magnitude(reference.size(), 0.0);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int k = 0; k < 64; ++k) {
        const double p = static_cast<double>(fp8_to_float(a[static_cast<std::size_t>(m * 64 + k)], F)) *
                         fp8_to_float(bt[static_cast<std::size_t>(n * 64 + k)], F);
        reference[static_cast<std::size_t>(m * kN + n)] += p;
        magnitude[static_cast<std::size_t>(m * kN + n)] += std::abs(p);
      }
    }
  }
  const LaunchConfig config{{1, 1, 1}, {128, 1, 1}, test_kernels::fp8_gemm_shared_bytes<kN, kSwizzle>()};
  std::vector<float> emu_c(reference.size(), -1.0F);
  {
    emu::Emulator emulator;
    emulator.register_buffer("a", a.data(), a.size());
    emulator.register_buffer("bt", bt.data(), bt.size());
    emulator.register_buffer("c", emu_c.data(), emu_c.size() * 4);
    emulator.launch(&test_kernels::wgmma_fp8_gemm<F, kN, kSwizzle, kARegisters>, config,
                    test_kernels::Fp8GemmParams{a.data(), bt.data(), emu_c.data()});
  }
  EXPECT_EQ(count_off(emu_c, reference, magnitude, 64, "emulator", kN), 0);
  if (!why_no_gpu.empty()) return;
  const char* swizzle = kSwizzle == Swizzle::k128B ? "k128B" : kSwizzle == Swizzle::k64B ? "k64B" : "kNone";
  const std::string args = std::string(F == Fp8::kE4M3 ? "attune::Fp8::kE4M3" : "attune::Fp8::kE5M2") + ", " +
                           std::to_string(kN) + ", attune::sm90::Swizzle::" + swizzle + ", " +
                           (kARegisters ? "true" : "false");
  const auto f = load_kernel("tests/emulator/wgmma_fp8_gemm.cuh",
                             "template __global__ void wgmma_fp8_gemm<" + args + ">(Fp8GemmParams);",
                             "attune::test_kernels::wgmma_fp8_gemm<" + args + ">");
  std::vector<float> gpu_c(emu_c.size(), -1.0F);
  Driver& driver = Driver::get();
  DeviceBuffers d(driver, {{a.data(), a.size()}, {bt.data(), bt.size()}, {gpu_c.data(), gpu_c.size() * 4}});
  launch_on_gpu(f, config,
                test_kernels::Fp8GemmParams{static_cast<const u8*>(d.at(0)), static_cast<const u8*>(d.at(1)),
                                            static_cast<float*>(d.at(2))});
  driver.copy_to_host(gpu_c.data(), d.at(2), gpu_c.size() * 4);
  std::vector<double> emu_as_want(emu_c.begin(), emu_c.end());
  EXPECT_EQ(count_off(gpu_c, emu_as_want, magnitude, 128, "GPU against the emulator", kN), 0);
}

TEST(HopperGpuTest, Fp8WgmmaFormsMatchTheEmulator) {
  const std::string why = gpu_unavailable();
  fp8_wgmma_form<Fp8::kE4M3, 64, Swizzle::k128B, false>("SS e4m3, 128B swizzle", why);
  fp8_wgmma_form<Fp8::kE4M3, 128, Swizzle::k128B, true>("RS (A in registers) e4m3, 128B swizzle", why);
  fp8_wgmma_form<Fp8::kE5M2, 64, Swizzle::kNone, false>("SS e5m2, no swizzle", why);
  if (!why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
}

// -- the warp-specialized pipeline --------------------------------------------------

TEST(HopperGpuTest, WarpSpecializedTmaGemmMatchesTheEmulator) {
  using D = Bf16;
  constexpr i32 kN = 64;
  constexpr int kKTiles = 6;  // three laps of a 2-stage ring: the parity flips
  using L = test_kernels::TmaGemmLayout<kN, Swizzle::k128B, 2>;
  const int k = kKTiles * L::kTileK;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<u16> a(static_cast<std::size_t>(128 * k)), bt(static_cast<std::size_t>(kN * k));
  for (u16& x : a) x = testing::bits_of<D>(dist(rng));
  for (u16& x : bt) x = testing::bits_of<D>(dist(rng));
  std::vector<double> reference(128 * kN, 0.0), magnitude(128 * kN, 0.0);
  for (int m = 0; m < 128; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int kk = 0; kk < k; ++kk) {
        const double p = testing::value_of<D>(a[static_cast<std::size_t>(m * k + kk)]) *
                         testing::value_of<D>(bt[static_cast<std::size_t>(n * k + kk)]);
        reference[static_cast<std::size_t>(m * kN + n)] += p;
        magnitude[static_cast<std::size_t>(m * kN + n)] += std::abs(p);
      }
    }
  }
  const auto maps = [&](const void* pa, const void* pb, void* pc, auto encode) {
    test_kernels::TmaGemmParams p = testing::tma_gemm_maps<kN, Swizzle::k128B>(pa, pb, pc, k, encode);
    p.k_tiles = kKTiles;
    p.plant = test_kernels::kTmaPlantNone;
    return p;
  };
  const LaunchConfig config{{1, 1, 1}, {384, 1, 1}, L::kSharedBytes};
  std::vector<float> emu_c(reference.size(), -1.0F);
  {
    emu::Emulator emulator;
    emulator.register_buffer("a", a.data(), a.size() * 2);
    emulator.register_buffer("b", bt.data(), bt.size() * 2);
    emulator.register_buffer("c", emu_c.data(), emu_c.size() * 4);
    emulator.launch(
        &test_kernels::tma_gemm<D, kN, Swizzle::k128B, 2>, config,
        maps(a.data(), bt.data(), emu_c.data(), [](const TensorMapSpec& s) { return encode_emulated_tensor_map(s); }));
  }
  EXPECT_EQ(count_off(emu_c, reference, magnitude, k, "emulator", kN), 0);
  if (const std::string why = gpu_unavailable(); !why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
  Driver& driver = Driver::get();
  const auto f = load_kernel(
      "tests/emulator/tma_gemm.cuh",
      "template __global__ void tma_gemm<Bf16, 64, sm90::Swizzle::k128B, 2>(const __grid_constant__ TmaGemmParams);",
      "attune::test_kernels::tma_gemm<attune::Bf16, 64, attune::sm90::Swizzle::k128B, 2>");
  std::vector<float> gpu_c(emu_c.size(), -1.0F);
  DeviceBuffers d(driver, {{a.data(), a.size() * 2}, {bt.data(), bt.size() * 2}, {gpu_c.data(), gpu_c.size() * 4}});
  launch_on_gpu(f, config,
                maps(d.at(0), d.at(1), d.at(2), [&](const TensorMapSpec& s) { return driver.encode_tensor_map(s); }));
  driver.copy_to_host(gpu_c.data(), d.at(2), gpu_c.size() * 4);
  std::vector<double> emu_as_want(emu_c.begin(), emu_c.end());
  EXPECT_EQ(count_off(gpu_c, emu_as_want, magnitude, 2.0 * k, "GPU against the emulator", kN), 0);
}

// -- the bounded wait (loses the context: its own process) ------------------------------

// $ATTUNE_WAIT_BOUND_MS, the bound the wait probes are built with; null when
// it is unset or not positive (tools/gpu_check sets it).
const char* wait_bound_ms() {
  const char* bound = std::getenv("ATTUNE_WAIT_BOUND_MS");
  return bound != nullptr && std::atoi(bound) > 0 ? bound : nullptr;
}

// hopper_probes.cuh's `probe`<0> built with the bounded wait of `bound` ms.
Driver::Function load_wait_probe(const std::string& probe, const char* bound) {
  return load_kernel("tests/emulator/hopper_probes.cuh",
                     "template __global__ void " + probe + "<0>(WaitForeverParams);",
                     "attune::test_kernels::" + probe + "<0>", {std::string("-DATTUNE_WAIT_BOUND_MS=") + bound});
}

// The report's path alone, kernel to host, with no trap: does the kernel see
// the slot the runtime installed, and do its stores reach the host?
TEST(HopperWaitBoundGpuTest, AReportWrittenThroughTheSlotReachesTheHost) {
  if (const std::string why = gpu_unavailable(); !why.empty()) GTEST_SKIP() << "GPU: " << why;
  const char* bound = wait_bound_ms();
  if (bound == nullptr) GTEST_SKIP() << "ATTUNE_WAIT_BOUND_MS is not set (tools/gpu_check sets it)";
  const auto f = load_wait_probe("write_report", bound);
  Driver& driver = Driver::get();
  u32 seen = 7;
  DeviceBuffers d(driver, {{&seen, 4}});
  launch_on_gpu(f, LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0}, test_kernels::WaitForeverParams{static_cast<u32*>(d.at(0))});
  driver.copy_to_host(&seen, d.at(0), 4);
  std::cout << "GPU: the kernel saw the slot: " << seen << "; installs " << cuda::wait_report_installs()
            << "; report: " << cuda::wait_report() << "\n";
  EXPECT_EQ(seen, 1U) << "the kernel's attune_wait_report is null: the slot was not installed in its module";
  EXPECT_NE(cuda::wait_report().find("block (7, 0, 0), thread 33"), std::string::npos) << cuda::wait_report();
  cuda::reset_wait_report();
  EXPECT_EQ(cuda::wait_report(), "");
}

TEST(HopperWaitBoundGpuTest, AWaitThatNeverCompletesTrapsAndNamesItsBarrier) {
  // The emulator finds the same hang at once, as a deadlock.
  {
    std::vector<u32> out(64, 0);
    emu::Emulator emulator;
    emulator.register_buffer("out", out.data(), out.size() * 4);
    try {
      emulator.launch(&test_kernels::wait_forever<0>, LaunchConfig{{1, 1, 1}, {64, 1, 1}, 16},
                      test_kernels::WaitForeverParams{out.data()});
      ADD_FAILURE() << "the emulator did not report the wait that never completes";
    } catch (const emu::KernelFault& fault) {
      EXPECT_NE(std::string(fault.what()).find("deadlock"), std::string::npos) << fault.what();
    }
  }
  if (const std::string why = gpu_unavailable(); !why.empty()) GTEST_SKIP() << "emulator half passed; GPU: " << why;
  const char* bound = wait_bound_ms();
  if (bound == nullptr) GTEST_SKIP() << "ATTUNE_WAIT_BOUND_MS is not set (tools/gpu_check sets it)";
  const auto f = load_wait_probe("wait_forever", bound);
  Driver& driver = Driver::get();
  DeviceBuffers d(driver, {{nullptr, 64 * 4}});
  try {
    launch_on_gpu(f, LaunchConfig{{3, 1, 1}, {64, 1, 1}, 16},
                  test_kernels::WaitForeverParams{static_cast<u32*>(d.at(0))});
    ADD_FAILURE() << "the launch returned: the bounded wait did not trap";
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    std::cout << "GPU: " << what << "\n";
    std::cout << "GPU: report slots installed in " << cuda::wait_report_installs() << " module(s)\n";
    EXPECT_GE(cuda::wait_report_installs(), 1) << "the kernel's report slot was not set";
    EXPECT_TRUE(e.sticky()) << what;
    EXPECT_NE(what.find("mbarrier wait gave up"), std::string::npos) << what;
    EXPECT_NE(what.find("waiting for parity 0"), std::string::npos) << what;
  }
  EXPECT_NE(cuda::wait_report(), "");
}

}  // namespace
}  // namespace attune
