// CUDA implementation of the primitives (see primitives.h): inline PTX for
// sm_80 and later. Included only when compiling device code.
#pragma once

#include "templates/fp8.h"
#include "templates/primitives/bounds_report.h"
#include "templates/primitives/config.h"

// The one dynamic shared-memory array of every kernel.
extern __shared__ __align__(16) unsigned char attune_dynamic_shared[];

// Where a kernel reports a length or page index it clamped (bounds_report.h):
// host-mapped memory the runtime installs at lookup; null: nothing reported.
extern "C" __device__ attune::BoundsReport* attune_bounds_report;
__device__ attune::BoundsReport* attune_bounds_report = nullptr;
// The last generation a thread of this module reported for (device memory:
// an atomic on host-mapped memory needs PCIe atomics).
__device__ attune::u32 attune_bounds_claimed = 0;

namespace attune::dev {

ATTUNE_DEVICE Dim3 thread_index() {
  return {static_cast<i32>(threadIdx.x), static_cast<i32>(threadIdx.y), static_cast<i32>(threadIdx.z)};
}
ATTUNE_DEVICE Dim3 block_index() {
  return {static_cast<i32>(blockIdx.x), static_cast<i32>(blockIdx.y), static_cast<i32>(blockIdx.z)};
}
ATTUNE_DEVICE Dim3 block_dim() {
  return {static_cast<i32>(blockDim.x), static_cast<i32>(blockDim.y), static_cast<i32>(blockDim.z)};
}
ATTUNE_DEVICE Dim3 grid_dim() {
  return {static_cast<i32>(gridDim.x), static_cast<i32>(gridDim.y), static_cast<i32>(gridDim.z)};
}
ATTUNE_DEVICE i32 linear_thread() {
  return static_cast<i32>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
ATTUNE_DEVICE i32 lane_id() { return linear_thread() % kWarpSize; }
ATTUNE_DEVICE i32 warp_id() { return linear_thread() / kWarpSize; }

template <class T>
ATTUNE_DEVICE T* shared_memory() {
  return reinterpret_cast<T*>(attune_dynamic_shared);
}
// Shared bytes a kernel carved out of the dynamic shared memory, seen as T
// (p aligned for T): the one place the templates retype shared memory.
template <class T, class U>
ATTUNE_DEVICE T* shared_as(U* p) {
  return reinterpret_cast<T*>(p);
}

template <class T>
ATTUNE_DEVICE T load_global(const T* p) {
  return *p;
}
template <class T>
ATTUNE_DEVICE void store_global(T* p, T value) {
  *p = value;
}
template <class T>
ATTUNE_DEVICE T load_shared(const T* p) {
  return *p;
}
template <class T>
ATTUNE_DEVICE void store_shared(T* p, T value) {
  *p = value;
}

ATTUNE_DEVICE void atomic_add(float* p, float value) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "f"(value) : "memory");
}

// The same add, where the kernel orders the adds to each word (semaphores):
// the emulator checks that every earlier add to the word happens before it.
ATTUNE_DEVICE void ordered_atomic_add(float* p, float value) { atomic_add(p, value); }

// Waits until the counter at p (global memory) holds at least `target`,
// with acquire semantics at device scope: what the block that released it
// wrote before its release is visible after.
ATTUNE_DEVICE void semaphore_wait(const i32* p, i32 target) {
  i32 value;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(__cvta_generic_to_global(p)) : "memory");
    if (value >= target) return;
  }
}

// Adds `value` to the counter at p with release semantics at device scope:
// the block's earlier writes (ordered before this thread by a barrier) are
// visible to whoever acquires the new value.
ATTUNE_DEVICE void semaphore_release(i32* p, i32 value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(value) : "memory");
}

// Adds `value` to *p (global memory) and returns what *p held before: a
// relaxed, device-scope atomicAdd (a persistent tile scheduler's tickets).
ATTUNE_DEVICE i32 atomic_fetch_add(i32* p, i32 value) {
  i32 old;
  asm volatile("atom.global.add.s32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(__cvta_generic_to_global(p)), "r"(value)
               : "memory");
  return old;
}

ATTUNE_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

ATTUNE_DEVICE float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Hardware tanh (MUFU.TANH, sm_75+): the score modifiers' softcap.
ATTUNE_DEVICE float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

ATTUNE_DEVICE float infinity() { return __int_as_float(0x7F800000); }
ATTUNE_DEVICE u32 float_bits(float value) { return __float_as_uint(value); }
ATTUNE_DEVICE float fmax(float a, float b) {
  float y;
  asm("max.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

// Bits [0, n) of a 32-bit word, n clamped to [0, 32] (PTX clamps a shift
// past the width: one shift, no compare for n >= 32).
ATTUNE_DEVICE u32 low_bits(i32 n) {
  u32 high;
  asm("shl.b32 %0, %1, %2;" : "=r"(high) : "r"(~0U), "r"(static_cast<u32>(n < 0 ? 0 : n)));
  return ~high;
}

// `value`, unknown to the compiler from here on: values derived from it are
// computed where they are used instead of being hoisted out of loops and
// held in registers (shared-memory lane offsets and their XOR steps).
ATTUNE_DEVICE i32 opaque(i32 value) {
  asm volatile("" : "+r"(value));
  return value;
}

// Shared-state-space address of a generic pointer to shared memory.
ATTUNE_DEVICE u32 shared_address(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

template <class D>
ATTUNE_DEVICE u32 pack2(float lo, float hi);
template <>
ATTUNE_DEVICE u32 pack2<Fp16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <>
ATTUNE_DEVICE u32 pack2<Bf16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <class D>
ATTUNE_DEVICE float to_float(u16 bits);
template <>
ATTUNE_DEVICE float to_float<Fp16>(u16 bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}
template <>
ATTUNE_DEVICE float to_float<Bf16>(u16 bits) {
  return __uint_as_float(static_cast<u32>(bits) << 16);
}

template <class D>
ATTUNE_DEVICE u16 to_bits(float value) {
  return static_cast<u16>(pack2<D>(value, 0.0f) & 0xFFFFu);
}
template <class D>
ATTUNE_DEVICE float unpack_lo(u32 pair) {
  return to_float<D>(static_cast<u16>(pair & 0xFFFFu));
}
template <class D>
ATTUNE_DEVICE float unpack_hi(u32 pair) {
  return to_float<D>(static_cast<u16>(pair >> 16));
}

// FP8 (templates/fp8.h). cvt to and from .e4m3x2/.e5m2x2 needs sm_89: these
// are templates an sm_80 module never instantiates, and instantiating one
// there fails here rather than in ptxas.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890 && !defined(ATTUNE_GEN)
inline constexpr bool kFp8Conversions = false;
#else
inline constexpr bool kFp8Conversions = true;
#endif
// Read at instantiation, so only a call from sm_80 code fails.
template <Fp8>
inline constexpr bool kFp8Instantiable = kFp8Conversions;

// cvt.rn.satfinite: round to nearest even, +-MAX_NORM past the largest
// finite magnitude and for +-inf, NaN to 0x7F; lo in bits 0..7.
template <Fp8 F>
ATTUNE_DEVICE u16 pack_fp8x2(float lo, float hi) {
  static_assert(kFp8Instantiable<F>, "fp8 conversions need sm_89 or later");
  u16 r;
  if constexpr (F == Fp8::kE4M3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  }
  return r;
}
// Both bytes widened to fp16 (exact), byte 0 to bits 0..15: an fp16 pair.
// Before sm_89 (no cvt from fp8) the same bits from integer operations
// (templates/fp8.h), so an fp8 KV cache reads alike on Ampere.
template <Fp8 F>
ATTUNE_DEVICE u32 fp8x2_to_half2(u16 pair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  return fp8x2_to_half2_bits(pair, F);
#else
  u32 r;
  if constexpr (F == Fp8::kE4M3) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(pair));
  } else {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(pair));
  }
  return r;
#endif
}
template <Fp8 F>
ATTUNE_DEVICE float unpack_fp8x2_lo(u16 pair) {
  return unpack_lo<Fp16>(fp8x2_to_half2<F>(pair));
}
template <Fp8 F>
ATTUNE_DEVICE float unpack_fp8x2_hi(u16 pair) {
  return unpack_hi<Fp16>(fp8x2_to_half2<F>(pair));
}

// prmt.b32 with a constant selector: byte i of the result is byte
// (kSelector >> 4 i) & 7 of the pair {a: bytes 0..3, b: bytes 4..7}.
template <u32 kSelector>
ATTUNE_DEVICE u32 byte_perm(u32 a, u32 b) {
  static_assert((kSelector & 0x8888U) == 0, "byte_perm: selectors 0..7 only (no sign replication)");
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(kSelector));
  return r;
}

namespace block {
ATTUNE_DEVICE void sync() { __syncthreads(); }
}  // namespace block

namespace warp {

constexpr u32 kFullMask = 0xFFFFFFFFu;

template <class T>
ATTUNE_DEVICE T shfl_xor(T value, i32 lane_mask) {
  return __shfl_xor_sync(kFullMask, value, lane_mask);
}
template <class T>
ATTUNE_DEVICE T shfl_idx(T value, i32 src_lane) {
  return __shfl_sync(kFullMask, value, src_lane);
}

template <class D>
ATTUNE_DEVICE void mma_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], const float (&c)[4]);
// The two specializations differ only in the element type's PTX name.
#define ATTUNE_MMA_M16N8K16(D, type)                                                                                  \
  template <>                                                                                                         \
  ATTUNE_DEVICE void mma_m16n8k16<D>(float(&d)[4], const u32(&a)[4], const u32(&b)[2], const float(&c)[4]) {          \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." type "." type                                               \
                 ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                                     \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), \
                   "f"(c[3]));                                                                                        \
  }
ATTUNE_MMA_M16N8K16(Fp16, "f16")
ATTUNE_MMA_M16N8K16(Bf16, "bf16")

// ldmatrix.x1, .x2, .x4 and their .trans forms: ldmatrix_xN and
// ldmatrix_xN_trans, N registers out, one shared address in.
#define ATTUNE_LDMATRIX(n, operands, ...)                                            \
  ATTUNE_DEVICE void ldmatrix_x##n(u32(&r)[n], const void* row) {                    \
    asm volatile("ldmatrix.sync.aligned.m8n8.x" #n ".shared.b16 " operands ";"       \
                 : __VA_ARGS__                                                       \
                 : "r"(shared_address(row)));                                        \
  }                                                                                  \
  ATTUNE_DEVICE void ldmatrix_x##n##_trans(u32(&r)[n], const void* row) {            \
    asm volatile("ldmatrix.sync.aligned.m8n8.x" #n ".trans.shared.b16 " operands ";" \
                 : __VA_ARGS__                                                       \
                 : "r"(shared_address(row)));                                        \
  }
ATTUNE_LDMATRIX(1, "{%0}, [%1]", "=r"(r[0]))
ATTUNE_LDMATRIX(2, "{%0,%1}, [%2]", "=r"(r[0]), "=r"(r[1]))
ATTUNE_LDMATRIX(4, "{%0,%1,%2,%3}, [%4]", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))

}  // namespace warp

namespace cp_async {

// Copies 16 bytes from global to shared memory asynchronously; bytes at and
// past src_bytes (0..16) are zero-filled and not read.
ATTUNE_DEVICE void copy16(void* shared_dst, const void* global_src, i32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(shared_dst)),
               "l"(__cvta_generic_to_global(global_src)), "r"(src_bytes)
               : "memory");
}
ATTUNE_DEVICE void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <i32 N>
ATTUNE_DEVICE void wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace cp_async

// Records that a kernel clamped a length or page it read from device memory
// (bounds_report.h): the first thread of each generation writes the report.
__device__ __noinline__ void report_bounds(u32 kind, i32 batch, i32 index, i32 value, i32 limit) {
  volatile BoundsReport* r = attune_bounds_report;
  if (r == nullptr) return;
  const u32 generation = r->generation + 1;
  if (atomicMax(&attune_bounds_claimed, generation) >= generation) return;
  r->kind = kind;
  r->batch = batch;
  r->index = index;
  r->value = value;
  r->limit = limit;
  __threadfence_system();
  r->magic = kBoundsReportMagic;
  __threadfence_system();
}

}  // namespace attune::dev
