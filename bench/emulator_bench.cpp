// Emulator throughput: barrier rounds of a 128-thread block, mma.sync per
// warp, and both together (the acceptance workload: 1,000 barrier rounds and
// 1,000 mma per warp in one 128-thread block).
#include <benchmark/benchmark.h>

#include <vector>

#include "core/tensor_map.h"
#include "emulator/emulator.h"
#include "templates/primitives/primitives.h"
#include "tests/emulator/tma_gemm.cuh"
#include "tests/emulator/wgmma_gemm.cuh"

namespace attune {
namespace {

struct Params {
  float* out;
  i32 rounds;
  bool barriers;
  bool mmas;
};

ATTUNE_KERNEL void rounds_kernel(Params p) {
  const i32 t = dev::linear_thread();
  float acc[4] = {0, 0, 0, 0};
  const u32 a[4] = {0x3C003C00U, 0x3C003C00U, 0x3C003C00U, 0x3C003C00U};  // fp16 ones
  const u32 b[2] = {0x3C003C00U, 0x3C003C00U};
  for (i32 r = 0; r < p.rounds; ++r) {
    if (p.barriers) dev::block::sync();
    if (p.mmas) {
      const float c[4] = {acc[0], acc[1], acc[2], acc[3]};
      dev::warp::mma_m16n8k16<Fp16>(acc, a, b, c);
    }
  }
  dev::store_global(p.out + t, acc[0]);
}

void run(benchmark::State& state, bool barriers, bool mmas) {
  const i32 rounds = static_cast<i32>(state.range(0));
  std::vector<float> out(128);
  emu::Emulator emulator;
  emulator.register_buffer("out", out.data(), out.size() * sizeof(float));
  const LaunchConfig config{.grid = {1, 1, 1}, .block = {128, 1, 1}};
  for (auto _ : state) {
    emulator.launch(&rounds_kernel, config, Params{out.data(), rounds, barriers, mmas});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["rounds/s"] =
      benchmark::Counter(static_cast<double>(rounds), benchmark::Counter::kIsIterationInvariantRate);
}

void barrier_rounds_128_threads(benchmark::State& state) { run(state, true, false); }
void mma_per_warp_4_warps(benchmark::State& state) { run(state, false, true); }
void barrier_and_mma_128_threads(benchmark::State& state) { run(state, true, true); }

// The wgmma GEMM of the emulator's tests (one warpgroup, 64 x N x 32: two
// wgmma m64nNk16 with operands stored through their descriptors), per launch.
template <i32 kN>
void wgmma_gemm_bf16(benchmark::State& state) {
  std::vector<u16> a(64 * 32, 0x3F80), b(32 * kN, 0x3F80);  // bf16 ones
  std::vector<float> c(64 * kN);
  emu::Emulator emulator;
  emulator.register_buffer("a", a.data(), a.size() * 2);
  emulator.register_buffer("b", b.data(), b.size() * 2);
  emulator.register_buffer("c", c.data(), c.size() * 4);
  using test_kernels::wgmma_gemm;
  const LaunchConfig config{
      {1, 1, 1}, {128, 1, 1}, test_kernels::gemm_shared_bytes<kN, sm90::Swizzle::k128B, false, false>()};
  for (auto _ : state) {
    emulator.launch(&wgmma_gemm<Bf16, kN, sm90::Swizzle::k128B, false, false, false>, config,
                    test_kernels::GemmParams{a.data(), b.data(), c.data(), test_kernels::kPlantNone});
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["MAC/s"] = benchmark::Counter(64.0 * kN * 32, benchmark::Counter::kIsIterationInvariantRate);
}

// The warp-specialized GEMM of the emulator's tests (tma_gemm.cuh: 384
// threads, 128 x N x K with K = 5 tiles of 64, TMA loads through a 2-stage
// ring, wgmma, a TMA store), per launch.
template <i32 kN>
void tma_gemm_bf16(benchmark::State& state) {
  constexpr i32 kK = 5 * 64;
  std::vector<u16> a(128 * kK, 0x3F80), bt(kN * kK, 0x3F80);  // bf16 ones
  std::vector<float> c(128 * kN);
  const auto map = [](const void* address, u64 inner, u64 rows, u32 box_inner, u32 box_rows, int bytes,
                      sm90::Swizzle swizzle) {
    TensorMapSpec s;
    s.address = address;
    s.element_bytes = bytes;
    s.dims = {inner, rows, 1, 1, 1};
    s.strides = {inner * static_cast<u64>(bytes), 0, 0, 0};
    s.box = {box_inner, box_rows, 1, 1, 1};
    s.swizzle = swizzle;
    return encode_emulated_tensor_map(s);
  };
  test_kernels::TmaGemmParams p{};
  p.a = map(a.data(), kK, 128, 64, 128, 2, sm90::Swizzle::k128B);
  p.b = map(bt.data(), kK, kN, 64, kN, 2, sm90::Swizzle::k128B);
  p.c = map(c.data(), kN, 128, kN, 64, 4, sm90::Swizzle::kNone);
  p.k_tiles = 5;
  emu::Emulator emulator;
  emulator.register_buffer("a", a.data(), a.size() * 2);
  emulator.register_buffer("b", bt.data(), bt.size() * 2);
  emulator.register_buffer("c", c.data(), c.size() * 4);
  using L = test_kernels::TmaGemmLayout<kN, sm90::Swizzle::k128B, 2>;
  const LaunchConfig config{{1, 1, 1}, {384, 1, 1}, L::kSharedBytes};
  for (auto _ : state) {
    emulator.launch(&test_kernels::tma_gemm<Bf16, kN, sm90::Swizzle::k128B, 2>, config, p);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["MAC/s"] = benchmark::Counter(128.0 * kN * kK, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(tma_gemm_bf16<64>)->Unit(benchmark::kMillisecond);
BENCHMARK(tma_gemm_bf16<256>)->Unit(benchmark::kMillisecond);
BENCHMARK(wgmma_gemm_bf16<64>)->Unit(benchmark::kMillisecond);
BENCHMARK(wgmma_gemm_bf16<256>)->Unit(benchmark::kMillisecond);
BENCHMARK(barrier_rounds_128_threads)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(mma_per_warp_4_warps)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(barrier_and_mma_128_threads)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace attune

BENCHMARK_MAIN();
