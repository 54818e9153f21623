// The device primitives: the only operations in attune's templates that touch
// hardware. One API, two implementations chosen at compile time:
//   cuda.h      inline PTX and CUDA built-ins, compiled by NVRTC;
//   emulated.h  host C++ that calls the CPU emulator (emulator/), which
//               checks every access and rendezvous.
//
// Rules the templates follow so both implementations see everything:
//   - global and shared memory are read and written only through
//     load_global / store_global / load_shared / store_shared, vectorized
//     (Vec16) or scalar, and through ldmatrix and cp.async;
//   - shared memory comes only from shared_memory<T>() (dynamic size);
//   - scopes are namespaces: block::sync(), warp::shfl_xor(), warp::mma_*(),
//     cp_async::copy16().
//
// API (T is u16, u32, i32, float or Vec16 unless said):
//   Dim3 thread_index(), block_index(), block_dim(), grid_dim();
//   i32 lane_id(), warp_id();                         // linear thread / 32
//   T* shared_memory<T>();                            // dynamic shared memory base
//   T* shared_as<T>(U* p);                            // carved shared bytes seen as T
//   T load_global<T>(const T*);  void store_global<T>(T*, T);
//   T load_shared<T>(const T*);  void store_shared<T>(T*, T);
//   void atomic_add(float* global, float value);
//   i32 atomic_fetch_add(i32* global, i32 value);     // returns the old value (relaxed, device scope)
//   void ordered_atomic_add(float* global, float value);  // atomic_add whose order the kernel fixes
//   void semaphore_wait(const i32* global, i32 target);   // spin until >= target (acquire, gpu scope)
//   void semaphore_release(i32* global, i32 value);       // add (release, gpu scope)
//   float exp2_approx(float);                         // ex2.approx.ftz.f32
//   float log2_approx(float);                         // lg2.approx.ftz.f32
//   float tanh_approx(float);                         // tanh.approx.f32
//   float infinity();                                 // +inf
//   u32 float_bits(float);                            // the float's bits
//   float fmax(float, float);                         // max.f32 (FMNMX): NaN only when both are
//   u32 pack2<Fp16|Bf16>(float lo, float hi);         // cvt.rn, round to nearest even
//   float unpack_lo<D>(u32), unpack_hi<D>(u32), to_float<D>(u16);  u16 to_bits<D>(float);
//   u16 pack_fp8x2<Fp8::kE4M3|kE5M2>(float lo, float hi);  // cvt.rn.satfinite (sm_89+; templates/fp8.h)
//   u32 fp8x2_to_half2<F>(u16);  float unpack_fp8x2_lo<F>(u16), unpack_fp8x2_hi<F>(u16);
//   u32 byte_perm<kSelector>(u32 a, u32 b);  // prmt.b32: byte i of the result is byte (nibble i of
//                                            // kSelector) of {a (0..3), b (4..7)}
//   block::sync();                                    // bar.sync 0
//   warp::shfl_xor(T, lane_mask), warp::shfl_idx(T, src_lane)   (T: u32, i32, float)
//   warp::reduce_max(float), warp::reduce_sum(float)
//   warp::mma_m16n8k16<D>(float d[4], const u32 a[4], const u32 b[2], const float c[4]);
//   warp::ldmatrix_x1/x2/x4(u32 r[N], const void* row), and *_trans   (.m8n8.shared.b16)
//   cp_async::copy16(void* shared_dst, const void* global_src, i32 src_bytes);  // zero-fills past src_bytes
//   cp_async::commit();  cp_async::wait<N>();          // cp.async.commit_group / wait_group N
//   report_bounds(kind, batch, index, value, limit);   // a clamped length or page (bounds_report.h)
#pragma once

#include "templates/primitives/config.h"

#if defined(ATTUNE_CUDA)
#include "templates/primitives/cuda.h"
#else
#include "templates/primitives/emulated.h"
#endif

namespace attune::dev::warp {

// Butterfly reductions over the 32 lanes of a warp: every lane gets the result.
ATTUNE_DEVICE float reduce_max(float value) {
  for (i32 mask = kWarpSize / 2; mask > 0; mask /= 2) {
    const float other = shfl_xor(value, mask);
    value = other > value ? other : value;
  }
  return value;
}

ATTUNE_DEVICE float reduce_sum(float value) {
  for (i32 mask = kWarpSize / 2; mask > 0; mask /= 2) value += shfl_xor(value, mask);
  return value;
}

}  // namespace attune::dev::warp
