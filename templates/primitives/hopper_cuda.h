// CUDA implementation of Hopper's primitives (sm_90a): warpgroup MMA with
// operands in shared memory (matrix descriptors, hopper_layout.h), the
// tensor-memory accelerator, mbarriers, named barriers, elect.sync and
// setmaxnreg, as inline PTX (PTX ISA 8.0+). Included only by Hopper
// templates, compiled for sm_90a; sm_80 kernels never see it.
//
// API (all in attune::dev; D is Fp16 or Bf16; bar is a u64 in shared memory):
//   warpgroup::index(), warpgroup::thread()            // warp-uniform; 0..127
//   wgmma::fence(); wgmma::commit(); wgmma::wait<N>();  // .fence/.commit_group/.wait_group
//   wgmma::fence_operands(float (&)[R])                // a compiler fence on registers
//   wgmma::mma_ss<D, N, kTransA, kTransB>(float (&d)[N/2], u64 desc_a, u64 desc_b, i32 accumulate)
//   wgmma::mma_rs<D, N, kTransB>(float (&d)[N/2], const u32 (&a)[4], u64 desc_b, i32 accumulate)
//   (both also take d as mma.sync's C fragment of a warp, float (&d)[1][N/8][4])
//   wgmma::mma_ss_fp8<F, N>(d, desc_a, desc_b, accumulate), mma_rs_fp8<F, N>(d, a, desc_b, accumulate)
//     // 8-bit inputs (Fp8::kE4M3 / kE5M2): k32, K-major operands only
//   wgmma::descriptor(const void* smem, lbo, sbo, Swizzle)   // sm90::encode_descriptor
//   wgmma::advance(u64 desc, u32 bytes)                      // sm90::advance_descriptor
//   registers::increase<R>(), registers::decrease<R>()  // setmaxnreg.{inc,dec}
//   mbarrier::init(bar, count), arrive(bar), arrive_expect_tx(bar, bytes), expect_tx(bar, bytes),
//     try_wait(bar, parity) -> bool, wait(bar, parity), invalidate(bar); fence_init()
//   fence_proxy_async()                                 // fence.proxy.async.shared::cta
//   stmatrix_x4(void* row, const u32 (&r)[4])           // stmatrix.m8n8.x4.b16: a lane's row address
//   stmatrix_x4_trans(void* row, const u32 (&r)[4])     // the same, .trans: each matrix transposed
//   named_barrier::sync(id, threads), named_barrier::arrive(id, threads)
//   elect_one() -> bool                                 // elect.sync: one lane of the warp
//   tma::load<2..5>(smem, const TensorMap*, bar, coords...), tma::store<2..5>(const TensorMap*, smem, coords...),
//   tma::reduce_add(const TensorMap*, smem, c0, c1, c2[, c3, c4]), tma::ordered_reduce_add(...)   (.add.f32, 3-D or
//   5-D) tma::commit(), tma::wait_read<N>(), tma::wait<N>(), tma::prefetch(const TensorMap*) Thread block clusters:
//   cluster::rank(), cluster::size(), cluster::sync()   // %cluster_ctarank, %cluster_nctarank, barrier.cluster
//   mbarrier::arrive_cluster(bar, cta)                  // an arrival on the same barrier of block `cta` (mapa)
//   tma::load_multicast(smem, map, bar, cta_mask, coords...)  // 2-D, 4-D: the box into every block in the
//     // mask, at the same shared bytes, completing each one's own bar
//
// Built with -DATTUNE_WAIT_BOUND_MS=N, mbarrier::wait gives up after N ms:
// the first thread to give up writes a WaitReport (wait_report.h) through
// `attune_wait_report` and traps, so a hang becomes a failed launch that
// names its barrier.
#pragma once

#include "templates/primitives/cuda.h"
#include "templates/primitives/hopper_layout.h"
#include "templates/primitives/wait_report.h"

// attune-gen only reads the templates (for sm_80): no code is generated.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(ATTUNE_GEN)
#error "templates/primitives/hopper_cuda.h: wgmma and setmaxnreg need sm_90a (compile with --gpu-architecture=sm_90a)"
#endif

// The operand lists of wgmma.mma_async for every N (8..256 by 8): N/2
// accumulators %0..%(N/2-1), then the descriptors or A registers, the
// accumulate flag and the transposition immediates.
#define ATTUNE_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define ATTUNE_WGMMA_OUT_8 ATTUNE_WGMMA_D4(0)
#define ATTUNE_WGMMA_OUT_16 ATTUNE_WGMMA_OUT_8, ATTUNE_WGMMA_D4(4)
#define ATTUNE_WGMMA_OUT_24 ATTUNE_WGMMA_OUT_16, ATTUNE_WGMMA_D4(8)
#define ATTUNE_WGMMA_OUT_32 ATTUNE_WGMMA_OUT_24, ATTUNE_WGMMA_D4(12)
#define ATTUNE_WGMMA_OUT_40 ATTUNE_WGMMA_OUT_32, ATTUNE_WGMMA_D4(16)
#define ATTUNE_WGMMA_OUT_48 ATTUNE_WGMMA_OUT_40, ATTUNE_WGMMA_D4(20)
#define ATTUNE_WGMMA_OUT_56 ATTUNE_WGMMA_OUT_48, ATTUNE_WGMMA_D4(24)
#define ATTUNE_WGMMA_OUT_64 ATTUNE_WGMMA_OUT_56, ATTUNE_WGMMA_D4(28)
#define ATTUNE_WGMMA_OUT_72 ATTUNE_WGMMA_OUT_64, ATTUNE_WGMMA_D4(32)
#define ATTUNE_WGMMA_OUT_80 ATTUNE_WGMMA_OUT_72, ATTUNE_WGMMA_D4(36)
#define ATTUNE_WGMMA_OUT_88 ATTUNE_WGMMA_OUT_80, ATTUNE_WGMMA_D4(40)
#define ATTUNE_WGMMA_OUT_96 ATTUNE_WGMMA_OUT_88, ATTUNE_WGMMA_D4(44)
#define ATTUNE_WGMMA_OUT_104 ATTUNE_WGMMA_OUT_96, ATTUNE_WGMMA_D4(48)
#define ATTUNE_WGMMA_OUT_112 ATTUNE_WGMMA_OUT_104, ATTUNE_WGMMA_D4(52)
#define ATTUNE_WGMMA_OUT_120 ATTUNE_WGMMA_OUT_112, ATTUNE_WGMMA_D4(56)
#define ATTUNE_WGMMA_OUT_128 ATTUNE_WGMMA_OUT_120, ATTUNE_WGMMA_D4(60)
#define ATTUNE_WGMMA_OUT_136 ATTUNE_WGMMA_OUT_128, ATTUNE_WGMMA_D4(64)
#define ATTUNE_WGMMA_OUT_144 ATTUNE_WGMMA_OUT_136, ATTUNE_WGMMA_D4(68)
#define ATTUNE_WGMMA_OUT_152 ATTUNE_WGMMA_OUT_144, ATTUNE_WGMMA_D4(72)
#define ATTUNE_WGMMA_OUT_160 ATTUNE_WGMMA_OUT_152, ATTUNE_WGMMA_D4(76)
#define ATTUNE_WGMMA_OUT_168 ATTUNE_WGMMA_OUT_160, ATTUNE_WGMMA_D4(80)
#define ATTUNE_WGMMA_OUT_176 ATTUNE_WGMMA_OUT_168, ATTUNE_WGMMA_D4(84)
#define ATTUNE_WGMMA_OUT_184 ATTUNE_WGMMA_OUT_176, ATTUNE_WGMMA_D4(88)
#define ATTUNE_WGMMA_OUT_192 ATTUNE_WGMMA_OUT_184, ATTUNE_WGMMA_D4(92)
#define ATTUNE_WGMMA_OUT_200 ATTUNE_WGMMA_OUT_192, ATTUNE_WGMMA_D4(96)
#define ATTUNE_WGMMA_OUT_208 ATTUNE_WGMMA_OUT_200, ATTUNE_WGMMA_D4(100)
#define ATTUNE_WGMMA_OUT_216 ATTUNE_WGMMA_OUT_208, ATTUNE_WGMMA_D4(104)
#define ATTUNE_WGMMA_OUT_224 ATTUNE_WGMMA_OUT_216, ATTUNE_WGMMA_D4(108)
#define ATTUNE_WGMMA_OUT_232 ATTUNE_WGMMA_OUT_224, ATTUNE_WGMMA_D4(112)
#define ATTUNE_WGMMA_OUT_240 ATTUNE_WGMMA_OUT_232, ATTUNE_WGMMA_D4(116)
#define ATTUNE_WGMMA_OUT_248 ATTUNE_WGMMA_OUT_240, ATTUNE_WGMMA_D4(120)
#define ATTUNE_WGMMA_OUT_256 ATTUNE_WGMMA_OUT_248, ATTUNE_WGMMA_D4(124)
#define ATTUNE_WGMMA_REGS_8 "%0, %1, %2, %3"
#define ATTUNE_WGMMA_REGS_16 ATTUNE_WGMMA_REGS_8 ", %4, %5, %6, %7"
#define ATTUNE_WGMMA_REGS_24 ATTUNE_WGMMA_REGS_16 ", %8, %9, %10, %11"
#define ATTUNE_WGMMA_REGS_32 ATTUNE_WGMMA_REGS_24 ", %12, %13, %14, %15"
#define ATTUNE_WGMMA_REGS_40 ATTUNE_WGMMA_REGS_32 ", %16, %17, %18, %19"
#define ATTUNE_WGMMA_REGS_48 ATTUNE_WGMMA_REGS_40 ", %20, %21, %22, %23"
#define ATTUNE_WGMMA_REGS_56 ATTUNE_WGMMA_REGS_48 ", %24, %25, %26, %27"
#define ATTUNE_WGMMA_REGS_64 ATTUNE_WGMMA_REGS_56 ", %28, %29, %30, %31"
#define ATTUNE_WGMMA_REGS_72 ATTUNE_WGMMA_REGS_64 ", %32, %33, %34, %35"
#define ATTUNE_WGMMA_REGS_80 ATTUNE_WGMMA_REGS_72 ", %36, %37, %38, %39"
#define ATTUNE_WGMMA_REGS_88 ATTUNE_WGMMA_REGS_80 ", %40, %41, %42, %43"
#define ATTUNE_WGMMA_REGS_96 ATTUNE_WGMMA_REGS_88 ", %44, %45, %46, %47"
#define ATTUNE_WGMMA_REGS_104 ATTUNE_WGMMA_REGS_96 ", %48, %49, %50, %51"
#define ATTUNE_WGMMA_REGS_112 ATTUNE_WGMMA_REGS_104 ", %52, %53, %54, %55"
#define ATTUNE_WGMMA_REGS_120 ATTUNE_WGMMA_REGS_112 ", %56, %57, %58, %59"
#define ATTUNE_WGMMA_REGS_128 ATTUNE_WGMMA_REGS_120 ", %60, %61, %62, %63"
#define ATTUNE_WGMMA_REGS_136 ATTUNE_WGMMA_REGS_128 ", %64, %65, %66, %67"
#define ATTUNE_WGMMA_REGS_144 ATTUNE_WGMMA_REGS_136 ", %68, %69, %70, %71"
#define ATTUNE_WGMMA_REGS_152 ATTUNE_WGMMA_REGS_144 ", %72, %73, %74, %75"
#define ATTUNE_WGMMA_REGS_160 ATTUNE_WGMMA_REGS_152 ", %76, %77, %78, %79"
#define ATTUNE_WGMMA_REGS_168 ATTUNE_WGMMA_REGS_160 ", %80, %81, %82, %83"
#define ATTUNE_WGMMA_REGS_176 ATTUNE_WGMMA_REGS_168 ", %84, %85, %86, %87"
#define ATTUNE_WGMMA_REGS_184 ATTUNE_WGMMA_REGS_176 ", %88, %89, %90, %91"
#define ATTUNE_WGMMA_REGS_192 ATTUNE_WGMMA_REGS_184 ", %92, %93, %94, %95"
#define ATTUNE_WGMMA_REGS_200 ATTUNE_WGMMA_REGS_192 ", %96, %97, %98, %99"
#define ATTUNE_WGMMA_REGS_208 ATTUNE_WGMMA_REGS_200 ", %100, %101, %102, %103"
#define ATTUNE_WGMMA_REGS_216 ATTUNE_WGMMA_REGS_208 ", %104, %105, %106, %107"
#define ATTUNE_WGMMA_REGS_224 ATTUNE_WGMMA_REGS_216 ", %108, %109, %110, %111"
#define ATTUNE_WGMMA_REGS_232 ATTUNE_WGMMA_REGS_224 ", %112, %113, %114, %115"
#define ATTUNE_WGMMA_REGS_240 ATTUNE_WGMMA_REGS_232 ", %116, %117, %118, %119"
#define ATTUNE_WGMMA_REGS_248 ATTUNE_WGMMA_REGS_240 ", %120, %121, %122, %123"
#define ATTUNE_WGMMA_REGS_256 ATTUNE_WGMMA_REGS_248 ", %124, %125, %126, %127"
// One row per N: X(T, N, b0..b6), where b0 = N/2 is the first operand after
// the accumulators and b1..b6 the ones after it (literal numbers, because
// the preprocessor pastes them into the PTX text and cannot add).
// clang-format off
#define ATTUNE_WGMMA_EACH_N(X, T) \
  X(T, 8, 4, 5, 6, 7, 8, 9, 10) else \
  X(T, 16, 8, 9, 10, 11, 12, 13, 14) else \
  X(T, 24, 12, 13, 14, 15, 16, 17, 18) else \
  X(T, 32, 16, 17, 18, 19, 20, 21, 22) else \
  X(T, 40, 20, 21, 22, 23, 24, 25, 26) else \
  X(T, 48, 24, 25, 26, 27, 28, 29, 30) else \
  X(T, 56, 28, 29, 30, 31, 32, 33, 34) else \
  X(T, 64, 32, 33, 34, 35, 36, 37, 38) else \
  X(T, 72, 36, 37, 38, 39, 40, 41, 42) else \
  X(T, 80, 40, 41, 42, 43, 44, 45, 46) else \
  X(T, 88, 44, 45, 46, 47, 48, 49, 50) else \
  X(T, 96, 48, 49, 50, 51, 52, 53, 54) else \
  X(T, 104, 52, 53, 54, 55, 56, 57, 58) else \
  X(T, 112, 56, 57, 58, 59, 60, 61, 62) else \
  X(T, 120, 60, 61, 62, 63, 64, 65, 66) else \
  X(T, 128, 64, 65, 66, 67, 68, 69, 70) else \
  X(T, 136, 68, 69, 70, 71, 72, 73, 74) else \
  X(T, 144, 72, 73, 74, 75, 76, 77, 78) else \
  X(T, 152, 76, 77, 78, 79, 80, 81, 82) else \
  X(T, 160, 80, 81, 82, 83, 84, 85, 86) else \
  X(T, 168, 84, 85, 86, 87, 88, 89, 90) else \
  X(T, 176, 88, 89, 90, 91, 92, 93, 94) else \
  X(T, 184, 92, 93, 94, 95, 96, 97, 98) else \
  X(T, 192, 96, 97, 98, 99, 100, 101, 102) else \
  X(T, 200, 100, 101, 102, 103, 104, 105, 106) else \
  X(T, 208, 104, 105, 106, 107, 108, 109, 110) else \
  X(T, 216, 108, 109, 110, 111, 112, 113, 114) else \
  X(T, 224, 112, 113, 114, 115, 116, 117, 118) else \
  X(T, 232, 116, 117, 118, 119, 120, 121, 122) else \
  X(T, 240, 120, 121, 122, 123, 124, 125, 126) else \
  X(T, 248, 124, 125, 126, 127, 128, 129, 130) else \
  X(T, 256, 128, 129, 130, 131, 132, 133, 134)
// clang-format on

// mma_ss: the descriptors of A and B are b0, b1, the accumulate flag b2 and
// the transpositions b3, b4. mma_rs: A's registers are b0..b3, B's
// descriptor b4, the flag b5 and B's transposition b6.
#define ATTUNE_WGMMA_SS_CASE(T, N, b0, b1, b2, b3, b4, b5, b6)                                        \
  if constexpr (kN == N) {                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #b2                                             \
                 ", 0;\n"                                                                             \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" ATTUNE_WGMMA_REGS_##N \
                 "}, %" #b0 ", %" #b1 ", p, 1, 1, %" #b3 ", %" #b4 ";\n}\n"                           \
                 : ATTUNE_WGMMA_OUT_##N                                                               \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB));            \
  }
#define ATTUNE_WGMMA_RS_CASE(T, N, b0, b1, b2, b3, b4, b5, b6)                                              \
  if constexpr (kN == N) {                                                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #b5                                                   \
                 ", 0;\n"                                                                                   \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " {" ATTUNE_WGMMA_REGS_##N       \
                 "}, {%" #b0 ", %" #b1 ", %" #b2 ", %" #b3 "}, %" #b4 ", p, 1, 1, %" #b6 ";\n}\n"           \
                 : ATTUNE_WGMMA_OUT_##N                                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB)); \
  }

// The same for 8-bit inputs (k32; no transposition immediates): mma_ss
// uses b0..b2, mma_rs b0..b5.
#define ATTUNE_WGMMA_SS8_CASE(T, N, b0, b1, b2, b3, b4, b5, b6)                                       \
  if constexpr (kN == N) {                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #b2                                             \
                 ", 0;\n"                                                                             \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." T "." T " {" ATTUNE_WGMMA_REGS_##N \
                 "}, %" #b0 ", %" #b1 ", p, 1, 1;\n}\n"                                               \
                 : ATTUNE_WGMMA_OUT_##N                                                               \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                        \
  }
#define ATTUNE_WGMMA_RS8_CASE(T, N, b0, b1, b2, b3, b4, b5, b6)                                       \
  if constexpr (kN == N) {                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #b5                                             \
                 ", 0;\n"                                                                             \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." T "." T " {" ATTUNE_WGMMA_REGS_##N \
                 "}, {%" #b0 ", %" #b1 ", %" #b2 ", %" #b3 "}, %" #b4 ", p, 1, 1;\n}\n"               \
                 : ATTUNE_WGMMA_OUT_##N                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));         \
  }

#if defined(ATTUNE_WAIT_BOUND_MS)
// Where a bounded wait reports (host-mapped memory; null: trap without a report).
extern "C" __device__ attune::WaitReport* attune_wait_report;
__device__ attune::WaitReport* attune_wait_report = nullptr;
// Which thread reports: claimed in device memory (an atomic on host-mapped
// memory needs PCIe atomics, which a machine may not have).
__device__ attune::u32 attune_wait_claimed = 0;
#endif

namespace attune::dev {

// stmatrix.sync.aligned.m8n8.x4.shared.b16 (sm_90): four 8 x 8 matrices of
// 16-bit elements. Lane l holds in r[m] row l / 4, elements 2 (l % 4) and
// + 1, of matrix m (an mma fragment's layout) and gives the address of
// row l % 8 of matrix l / 8 (16 bytes).
ATTUNE_DEVICE void stmatrix_x4(void* row, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(shared_address(row)), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// The same with .trans: each matrix stored transposed (row l % 8 of
// matrix l / 8 holds column l % 8 of the fragment's matrix): an m-major
// fragment to k-major rows.
ATTUNE_DEVICE void stmatrix_x4_trans(void* row, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(shared_address(row)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

namespace warpgroup {
// The warpgroup of this thread, made warp-uniform (a shuffle from lane 0) so
// the compiler knows role branches do not diverge within a warp.
ATTUNE_DEVICE i32 index() { return __shfl_sync(0xFFFFFFFFu, linear_thread() / sm90::kWarpgroupSize, 0); }
ATTUNE_DEVICE i32 thread() { return linear_thread() % sm90::kWarpgroupSize; }
}  // namespace warpgroup

namespace wgmma {

ATTUNE_DEVICE void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
ATTUNE_DEVICE void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are in flight.
template <i32 N>
ATTUNE_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of these registers across
// this point (accumulators of an in-flight wgmma are not to be touched).
template <i32 R>
ATTUNE_DEVICE void fence_operands(float (&r)[R]) {
  ATTUNE_UNROLL
  for (i32 i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <i32 R>
ATTUNE_DEVICE void fence_operands(u32 (&r)[R]) {
  ATTUNE_UNROLL
  for (i32 i = 0; i < R; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// sm90::advance_descriptor on the two halves, so the compiler adds in 32
// bits (left to itself it widens the add and carries into the high word:
// two more uniform instructions per wgmma).
ATTUNE_DEVICE u64 advance(u64 descriptor, u32 bytes) {
  u32 lo;
  u32 hi;
  asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(descriptor));
  lo += bytes >> 4;
  u64 out;
  asm("mov.b64 %0, {%1, %2};" : "=l"(out) : "r"(lo), "r"(hi));
  return out;
}

ATTUNE_DEVICE u64 descriptor(const void* smem, u32 leading_bytes, u32 stride_bytes, sm90::Swizzle swizzle) {
  sm90::MatrixDescriptor d;
  d.start = shared_address(smem);
  d.leading_bytes = leading_bytes;
  d.stride_bytes = stride_bytes;
  d.swizzle = swizzle;
  return sm90::encode_descriptor(d);
}

template <class D>
inline constexpr bool kIsBf16 = false;
template <>
inline constexpr bool kIsBf16<Bf16> = true;

// D[64 x N] (+)= A[64 x 16] * B[16 x N]; A and B from shared memory. With
// accumulate == 0 the accumulators are overwritten.
template <class D, i32 kN, i32 kTransA, i32 kTransB>
ATTUNE_DEVICE void mma_ss(float (&d)[kN / 2], u64 desc_a, u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (kIsBf16<D>) {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_SS_CASE, "bf16")
  } else {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_SS_CASE, "f16")
  }
}

// The same with A from registers (sm90::a_fragment_row/col).
template <class D, i32 kN, i32 kTransB>
ATTUNE_DEVICE void mma_rs(float (&d)[kN / 2], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (kIsBf16<D>) {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_RS_CASE, "bf16")
  } else {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_RS_CASE, "f16")
  }
}

// The same two with the accumulators as the tile code holds a warp's rows:
// mma.sync's C fragment of 16 rows by kN columns, [1][kN/8][4], which is
// the layout of one warp's share of the wgmma accumulator.
template <class D, i32 kN, i32 kTransA, i32 kTransB>
ATTUNE_DEVICE void mma_ss(float (&d)[1][kN / 8][4], u64 desc_a, u64 desc_b, i32 accumulate) {
  mma_ss<D, kN, kTransA, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), desc_a, desc_b, accumulate);
}
template <class D, i32 kN, i32 kTransB>
ATTUNE_DEVICE void mma_rs(float (&d)[1][kN / 8][4], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  mma_rs<D, kN, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), a, desc_b, accumulate);
}

// 8-bit inputs (e4m3, e5m2): D[64 x N] (+)= A[64 x 32] * B[32 x N], both
// K-major (the ISA has no transposition for 8-bit types); A from shared
// memory or from registers (sm90::a_fragment_row, a8_fragment_col).
template <Fp8 F, i32 kN>
ATTUNE_DEVICE void mma_ss_fp8(float (&d)[kN / 2], u64 desc_a, u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (F == Fp8::kE4M3) {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_SS8_CASE, "e4m3")
  } else {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_SS8_CASE, "e5m2")
  }
}
template <Fp8 F, i32 kN>
ATTUNE_DEVICE void mma_rs_fp8(float (&d)[kN / 2], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (F == Fp8::kE4M3) {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_RS8_CASE, "e4m3")
  } else {
    ATTUNE_WGMMA_EACH_N(ATTUNE_WGMMA_RS8_CASE, "e5m2")
  }
}
template <Fp8 F, i32 kN>
ATTUNE_DEVICE void mma_ss_fp8(float (&d)[1][kN / 8][4], u64 desc_a, u64 desc_b, i32 accumulate) {
  mma_ss_fp8<F, kN>(reinterpret_cast<float(&)[kN / 2]>(d), desc_a, desc_b, accumulate);
}
template <Fp8 F, i32 kN>
ATTUNE_DEVICE void mma_rs_fp8(float (&d)[1][kN / 8][4], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  mma_rs_fp8<F, kN>(reinterpret_cast<float(&)[kN / 2]>(d), a, desc_b, accumulate);
}

}  // namespace wgmma

namespace registers {
// setmaxnreg: R is a multiple of 8 in 24..256. Takes effect only in a kernel
// with a register cap at entry (ptxas warns C7508 otherwise).
template <i32 R>
ATTUNE_DEVICE void increase() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <i32 R>
ATTUNE_DEVICE void decrease() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
}  // namespace registers

namespace mbarrier {
ATTUNE_DEVICE void init(u64* bar, i32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA).
ATTUNE_DEVICE void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
ATTUNE_DEVICE void arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// Arrives and adds `bytes` to the transactions the current phase waits for.
ATTUNE_DEVICE void arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
ATTUNE_DEVICE void expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// One arrival on the barrier at the same shared bytes of block `cta` of the
// cluster (a consumer's release of a stage that its peer's producer fills).
// The default .release.cta, as CUTLASS's cluster barriers: what it orders
// are reads whose wgmma wait has returned, and .cluster scope would add a
// GPU-wide memory barrier (MEMBAR.ALL.GPU) to every release.
ATTUNE_DEVICE void arrive_cluster(u64* bar, i32 cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(shared_address(bar)),
      "r"(cta)
      : "memory");
}
// mbarrier.try_wait and mbarrier.test_wait ask the same question (has the
// phase of this parity completed?); try_wait may suspend the thread a while
// before it answers, test_wait answers at once. Each is a function of its
// own name.
#define ATTUNE_MBARRIER_PHASE_QUERY(op)                                                                               \
  ATTUNE_DEVICE bool op(u64* bar, u32 parity) {                                                                       \
    u32 done;                                                                                                         \
    asm volatile("{\n.reg .pred p;\nmbarrier." #op ".parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n" \
                 : "=r"(done)                                                                                         \
                 : "r"(shared_address(bar)), "r"(parity)                                                              \
                 : "memory");                                                                                         \
    return done != 0;                                                                                                 \
  }
ATTUNE_MBARRIER_PHASE_QUERY(try_wait)
#if defined(ATTUNE_WAIT_BOUND_MS)
ATTUNE_DEVICE u64 global_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
ATTUNE_MBARRIER_PHASE_QUERY(test_wait)
// The first thread to give up fills the report and traps; the others go on
// waiting (a trap ends the whole grid, so one of theirs could cut the
// report's stores short). Without a slot every thread traps at once.
__device__ __noinline__ void give_up(u64* bar, u32 parity, u64 waited_ns) {
  WaitReport* r = attune_wait_report;
  if (r != nullptr) {
    if (atomicCAS(&attune_wait_claimed, 0U, 1U) != 0U) return;
    volatile WaitReport* v = r;
    v->claimed = 1;
    v->block[0] = blockIdx.x;
    v->block[1] = blockIdx.y;
    v->block[2] = blockIdx.z;
    v->thread = static_cast<u32>(linear_thread());
    v->barrier = shared_address(bar);
    v->parity = parity;
    // Which parities have completed now: bit 0 parity 0, bit 1 parity 1.
    v->state = (test_wait(bar, 0) ? 1ULL : 0ULL) | (test_wait(bar, 1) ? 2ULL : 0ULL);
    v->waited_ns = waited_ns;
    v->bound_ms = ATTUNE_WAIT_BOUND_MS;
    __threadfence_system();
    v->magic = kWaitReportMagic;
    __threadfence_system();
    // Read back over the bus before the trap (a spin here makes ptxas fail
    // the 240-register consumer regions of some variants: C7600).
    const u32 landed = v->magic;
    asm volatile("" ::"r"(landed) : "memory");
  }
  asm volatile("trap;\n" ::: "memory");
}
#endif
ATTUNE_DEVICE void wait(u64* bar, u32 parity) {
#if defined(ATTUNE_WAIT_BOUND_MS)
  if (try_wait(bar, parity)) return;
  const u64 start = global_ns();
  while (!try_wait(bar, parity)) {
    const u64 waited = global_ns() - start;
    if (waited > static_cast<u64>(ATTUNE_WAIT_BOUND_MS) * 1000000ULL) give_up(bar, parity, waited);
  }
#else
  while (!try_wait(bar, parity)) {
  }
#endif
}
ATTUNE_DEVICE void invalidate(u64* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
}  // namespace mbarrier

// Orders this thread's ordinary shared-memory accesses before later accesses
// of the async proxy (wgmma operands, TMA stores) and the other way round.
ATTUNE_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

namespace named_barrier {
// bar.sync / bar.arrive on barrier `id` (1..15; 0 is block::sync) for
// `threads` threads (a multiple of 32).
ATTUNE_DEVICE void sync(i32 id, i32 threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
ATTUNE_DEVICE void arrive(i32 id, i32 threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
}  // namespace named_barrier

// One lane of the (fully active) warp is elected: true there only.
ATTUNE_DEVICE bool elect_one() {
  u32 elected;
  asm volatile("{\n.reg .b32 lane;\n.reg .pred p;\nelect.sync lane|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(elected));
  return elected != 0;
}

namespace tma {

ATTUNE_DEVICE u64 map_address(const TensorMap* map) { return reinterpret_cast<u64>(map); }

// A box of the tensor map at coordinates c (innermost first) into shared
// memory, completing `bytes of the box` transactions on bar.
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, %7}], [%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// The same box into the same shared bytes of every block of the cluster in
// `cta_mask` (bit r: rank r), completing the barrier at bar's bytes in each.
ATTUNE_DEVICE void load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%4, %5}], [%2], %3;\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "h"(static_cast<unsigned short>(cta_mask)), "r"(c0), "r"(c1)
      : "memory");
}
ATTUNE_DEVICE void load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, i32 c0, i32 c1, i32 c2,
                                  i32 c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "h"(static_cast<unsigned short>(cta_mask)), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3)
      : "memory");
}

// A box of shared memory to the tensor at coordinates c; joins this thread's
// open bulk group (commit, then wait_read before reusing the shared bytes).
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1)
      : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   map_address(map)),
               "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
                   map_address(map)),
               "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
// Adds a box of fp32 shared memory to the tensor at coordinates c, element
// by element (a bulk reduction: atomic per element, no order between
// blocks); joins this thread's open bulk group like a store.
ATTUNE_DEVICE void reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
ATTUNE_DEVICE void reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
          map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
// The same, where the kernel orders the reductions to each element
// (semaphores): the emulator checks that the earlier ones happen before.
ATTUNE_DEVICE void ordered_reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2) {
  reduce_add(map, smem, c0, c1, c2);
}
ATTUNE_DEVICE void ordered_reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  reduce_add(map, smem, c0, c1, c2, c3, c4);
}
ATTUNE_DEVICE void commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N bulk groups still read their shared-memory source.
template <i32 N>
ATTUNE_DEVICE void wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N bulk groups are in flight: the others' writes are
// done (before a release that must cover them).
template <i32 N>
ATTUNE_DEVICE void wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
ATTUNE_DEVICE void prefetch(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map_address(map)) : "memory");
}

}  // namespace tma

namespace cluster {
ATTUNE_DEVICE i32 rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<i32>(r);
}
ATTUNE_DEVICE i32 size() {
  u32 n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return static_cast<i32>(n);
}
// Every thread of the cluster that has not exited: what each did before is
// visible to all after (barriers' init before a peer's remote arrival, a
// block's last remote access before its peer exits).
ATTUNE_DEVICE void sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
}  // namespace cluster

}  // namespace attune::dev
