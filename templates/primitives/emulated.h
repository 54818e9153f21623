// Emulator implementation of the primitives (see primitives.h): host C++ that
// hands every memory access and every rendezvous to the CPU emulator
// (emulator/), which checks it. Each call records its call site so that a
// report points at the template line.
#pragma once

#include <bit>
#include <cmath>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "templates/fp8.h"
#include "templates/primitives/bounds_report.h"
#include "templates/primitives/config.h"

namespace attune::emu::hooks {

using Where = std::source_location;

// Implemented by the emulator library for the thread it is running.
Dim3 thread_index();
Dim3 block_index();
Dim3 block_dim();
Dim3 grid_dim();
unsigned char* shared_base();
// Checks an access; false means it is out of bounds and must be skipped.
bool global_access(const void* p, u64 bytes, bool write, const Where& where);
bool shared_access(const void* p, u64 bytes, bool write, const Where& where);
void barrier(const Where& where);
u32 shfl(u32 value, i32 operand, bool xor_mode, const Where& where);
void mma_m16n8k16(bool bf16, float* d, const u32* a, const u32* b, const float* c, const Where& where);
void ldmatrix(i32 matrices, bool trans, u32* r, const void* row, const Where& where);
void cp_async(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where);
void cp_async_commit(const Where& where);
void cp_async_wait(i32 pending, const Where& where);
void atomic_add(float* p, float value, const Where& where);
void ordered_atomic_add(float* p, float value, const Where& where);
void semaphore_wait(const i32* p, i32 target, const Where& where);
void semaphore_release(i32* p, i32 value, const Where& where);
i32 atomic_fetch_add(i32* p, i32 value, const Where& where);
float half_to_float(u16 bits);
u16 float_to_half(float value);
u16 float_to_bfloat16(float value);
float exp2_approx(float value);
float log2_approx(float value);
float tanh_approx(float value);
// A float store of the NaN an accumulator holds while its wgmma is in flight
// (hopper_emulated.h): the value was read before the wait that covers it.
inline constexpr u32 kInFlightPoison = 0x7FBADBADU;
void in_flight_value_stored(const Where& where);
// A length or page index a kernel clamped (bounds_report.h; emulator/bounds_report.h).
void report_bounds(u32 kind, i32 batch, i32 index, i32 value, i32 limit);

}  // namespace attune::emu::hooks

namespace attune::dev {

using Where = std::source_location;

inline Dim3 thread_index() { return emu::hooks::thread_index(); }
inline Dim3 block_index() { return emu::hooks::block_index(); }
inline Dim3 block_dim() { return emu::hooks::block_dim(); }
inline Dim3 grid_dim() { return emu::hooks::grid_dim(); }
inline i32 linear_thread() {
  const Dim3 t = thread_index();
  const Dim3 b = block_dim();
  return t.x + b.x * (t.y + b.y * t.z);
}
inline i32 lane_id() { return linear_thread() % kWarpSize; }
inline i32 warp_id() { return linear_thread() / kWarpSize; }

template <class T>
T* shared_memory() {
  return reinterpret_cast<T*>(emu::hooks::shared_base());
}
// Shared bytes a kernel carved out, seen as T; every access through the
// result is checked for bounds and alignment like any other.
template <class T, class U>
T* shared_as(U* p) {
  return reinterpret_cast<T*>(p);
}

// A load or store is checked by the hook of its state space (global or
// shared) and happens only if the hook lets it; a stored float equal to the
// in-flight poison is reported as a read of an unfinished wgmma result.
using AccessHook = bool (*)(const void*, u64, bool, const Where&);
template <AccessHook kCheck, class T>
T checked_load(const T* p, const Where& where) {
  T value{};
  if (kCheck(p, sizeof(T), /*write=*/false, where)) std::memcpy(&value, p, sizeof(T));
  return value;
}
template <AccessHook kCheck, class T>
void checked_store(T* p, T value, const Where& where) {
  if constexpr (std::is_same_v<T, float>) {
    if (std::bit_cast<u32>(value) == emu::hooks::kInFlightPoison) emu::hooks::in_flight_value_stored(where);
  }
  if (kCheck(p, sizeof(T), /*write=*/true, where)) std::memcpy(p, &value, sizeof(T));
}
template <class T>
T load_global(const T* p, const Where& where = Where::current()) {
  return checked_load<emu::hooks::global_access>(p, where);
}
template <class T>
void store_global(T* p, T value, const Where& where = Where::current()) {
  checked_store<emu::hooks::global_access>(p, value, where);
}
template <class T>
T load_shared(const T* p, const Where& where = Where::current()) {
  return checked_load<emu::hooks::shared_access>(p, where);
}
template <class T>
void store_shared(T* p, T value, const Where& where = Where::current()) {
  checked_store<emu::hooks::shared_access>(p, value, where);
}

inline void atomic_add(float* p, float value, const Where& where = Where::current()) {
  emu::hooks::atomic_add(p, value, where);
}
inline i32 atomic_fetch_add(i32* p, i32 value, const Where& where = Where::current()) {
  return emu::hooks::atomic_fetch_add(p, value, where);
}
inline void ordered_atomic_add(float* p, float value, const Where& where = Where::current()) {
  emu::hooks::ordered_atomic_add(p, value, where);
}
inline void semaphore_wait(const i32* p, i32 target, const Where& where = Where::current()) {
  emu::hooks::semaphore_wait(p, target, where);
}
inline void semaphore_release(i32* p, i32 value, const Where& where = Where::current()) {
  emu::hooks::semaphore_release(p, value, where);
}

inline float exp2_approx(float x) { return emu::hooks::exp2_approx(x); }
inline float log2_approx(float x) { return emu::hooks::log2_approx(x); }
inline float tanh_approx(float x) { return emu::hooks::tanh_approx(x); }
inline float infinity() { return std::bit_cast<float>(0x7F800000U); }
inline u32 float_bits(float value) { return std::bit_cast<u32>(value); }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline i32 opaque(i32 value) { return value; }
inline u32 low_bits(i32 n) { return n <= 0 ? 0U : n >= 32 ? ~0U : (1U << n) - 1; }

template <class D>
float to_float(u16 bits) {
  if constexpr (std::is_same_v<D, Fp16>) {
    return emu::hooks::half_to_float(bits);
  } else {
    return std::bit_cast<float>(static_cast<u32>(bits) << 16);
  }
}
template <class D>
u16 to_bits(float value) {
  if constexpr (std::is_same_v<D, Fp16>) {
    return emu::hooks::float_to_half(value);
  } else {
    return emu::hooks::float_to_bfloat16(value);
  }
}
template <class D>
u32 pack2(float lo, float hi) {
  return static_cast<u32>(to_bits<D>(lo)) | (static_cast<u32>(to_bits<D>(hi)) << 16);
}
template <class D>
float unpack_lo(u32 pair) {
  return to_float<D>(static_cast<u16>(pair & 0xFFFFU));
}
template <class D>
float unpack_hi(u32 pair) {
  return to_float<D>(static_cast<u16>(pair >> 16));
}

// FP8, bit for bit as cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and
// cvt.rn.f16x2.{e4m3x2,e5m2x2} (templates/fp8.h).
template <Fp8 F>
u16 pack_fp8x2(float lo, float hi) {
  return attune::pack_fp8x2(lo, hi, F);
}
template <Fp8 F>
u32 fp8x2_to_half2(u16 pair) {
  return fp8x2_to_half2_bits(pair, F);
}
template <Fp8 F>
float unpack_fp8x2_lo(u16 pair) {
  return unpack_lo<Fp16>(fp8x2_to_half2<F>(pair));
}
template <Fp8 F>
float unpack_fp8x2_hi(u16 pair) {
  return unpack_hi<Fp16>(fp8x2_to_half2<F>(pair));
}

template <u32 kSelector>
u32 byte_perm(u32 a, u32 b) {
  static_assert((kSelector & 0x8888U) == 0, "byte_perm: selectors 0..7 only (no sign replication)");
  const u64 pair = (static_cast<u64>(b) << 32) | a;
  u32 r = 0;
  for (u32 i = 0; i < 4; ++i) r |= static_cast<u32>((pair >> (8 * ((kSelector >> (4 * i)) & 7U))) & 0xFFU) << (8 * i);
  return r;
}

namespace block {
inline void sync(const Where& where = Where::current()) { emu::hooks::barrier(where); }
}  // namespace block

namespace warp {

template <class T>
T shfl_xor(T value, i32 lane_mask, const Where& where = Where::current()) {
  static_assert(sizeof(T) == 4, "shuffles move 32-bit values");
  return std::bit_cast<T>(emu::hooks::shfl(std::bit_cast<u32>(value), lane_mask, /*xor_mode=*/true, where));
}
template <class T>
T shfl_idx(T value, i32 src_lane, const Where& where = Where::current()) {
  static_assert(sizeof(T) == 4, "shuffles move 32-bit values");
  return std::bit_cast<T>(emu::hooks::shfl(std::bit_cast<u32>(value), src_lane, /*xor_mode=*/false, where));
}

template <class D>
void mma_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], const float (&c)[4],
                  const Where& where = Where::current()) {
  emu::hooks::mma_m16n8k16(std::is_same_v<D, Bf16>, d, a, b, c, where);
}

// ldmatrix_xN and ldmatrix_xN_trans, as in the CUDA primitives.
#define ATTUNE_EMU_LDMATRIX(n)                                                                            \
  inline void ldmatrix_x##n(u32(&r)[n], const void* row, const Where& where = Where::current()) {         \
    emu::hooks::ldmatrix(n, false, r, row, where);                                                        \
  }                                                                                                       \
  inline void ldmatrix_x##n##_trans(u32(&r)[n], const void* row, const Where& where = Where::current()) { \
    emu::hooks::ldmatrix(n, true, r, row, where);                                                         \
  }
ATTUNE_EMU_LDMATRIX(1)
ATTUNE_EMU_LDMATRIX(2)
ATTUNE_EMU_LDMATRIX(4)

}  // namespace warp

namespace cp_async {
inline void copy16(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where = Where::current()) {
  emu::hooks::cp_async(shared_dst, global_src, src_bytes, where);
}
inline void commit(const Where& where = Where::current()) { emu::hooks::cp_async_commit(where); }
template <i32 N>
void wait(const Where& where = Where::current()) {
  emu::hooks::cp_async_wait(N, where);
}
}  // namespace cp_async

inline void report_bounds(u32 kind, i32 batch, i32 index, i32 value, i32 limit) {
  emu::hooks::report_bounds(kind, batch, index, value, limit);
}

}  // namespace attune::dev
