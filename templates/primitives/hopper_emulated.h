// Emulator implementation of Hopper's primitives (see hopper_cuda.h for the
// API): wgmma is a warpgroup collective that the emulator runs as late as
// the ISA allows (at the wait_group that covers it), reading shared memory
// through hopper_layout.h's descriptors, and checks what the ISA leaves
// undefined (emulator/warpgroup_ops.h, docs/emulator.md).
#pragma once

#include <source_location>

#include "templates/primitives/emulated.h"
#include "templates/primitives/hopper_layout.h"

namespace attune::emu::hooks {

void wgmma_fence(const Where& where);
void wgmma_commit(const Where& where);
void wgmma_wait(i32 pending, const Where& where);
// a_registers: null when A is in shared memory (desc_a).
void wgmma(bool bf16, i32 n, bool trans_a, bool trans_b, u64 desc_a, u64 desc_b, u32* a_registers, float* d,
           i32 accumulate, const Where& where);
// 8-bit inputs (format 1 e4m3, 2 e5m2): k32, both operands K-major.
void wgmma_fp8(i32 format, i32 n, u64 desc_a, u64 desc_b, u32* a_registers, float* d, i32 accumulate,
               const Where& where);
void fence_proxy_async(const Where& where);
void stmatrix(i32 matrices, bool trans, const u32* r, void* row, const Where& where);
void setmaxnreg(bool increase, i32 registers, const Where& where);
void mbarrier_init(u64* bar, i32 count, const Where& where);
void mbarrier_arrive(u64* bar, u32 tx_bytes, const Where& where);
void mbarrier_expect_tx(u64* bar, u32 tx_bytes, const Where& where);
void mbarrier_wait(u64* bar, u32 parity, const Where& where);
void mbarrier_invalidate(u64* bar, const Where& where);
void named_barrier(i32 id, i32 threads, bool sync, const Where& where);
bool elect_one(const Where& where);
// coords: `rank` of them, innermost first.
void tma_load(void* smem, const TensorMap* map, u64* bar, const i32* coords, i32 rank, const Where& where);
void tma_store(const TensorMap* map, const void* smem, const i32* coords, i32 rank, const Where& where);
void tma_commit(const Where& where);
void tma_wait_read(i32 pending, const Where& where);
void tma_wait(i32 pending, const Where& where);
void tma_reduce_add(const TensorMap* map, const void* smem, const i32* coords, i32 rank, bool ordered,
                    const Where& where);
void tma_prefetch(const TensorMap* map, const Where& where);
void tma_load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, const i32* coords, i32 rank,
                        const Where& where);
void mbarrier_arrive_cluster(u64* bar, i32 cta, const Where& where);
i32 cluster_rank();
i32 cluster_size();
void cluster_sync(const Where& where);

}  // namespace attune::emu::hooks

namespace attune::dev {

// stmatrix.x4, as in the CUDA primitives: a warp collective, checked as
// each lane's 16-byte store.
inline void stmatrix_x4(void* row, const u32 (&r)[4], const Where& where = Where::current()) {
  emu::hooks::stmatrix(4, false, r, row, where);
}
inline void stmatrix_x4_trans(void* row, const u32 (&r)[4], const Where& where = Where::current()) {
  emu::hooks::stmatrix(4, true, r, row, where);
}

namespace warpgroup {
inline i32 index() { return linear_thread() / sm90::kWarpgroupSize; }
inline i32 thread() { return linear_thread() % sm90::kWarpgroupSize; }
}  // namespace warpgroup

namespace wgmma {

inline void fence(const Where& where = Where::current()) { emu::hooks::wgmma_fence(where); }
inline void commit(const Where& where = Where::current()) { emu::hooks::wgmma_commit(where); }
template <i32 N>
void wait(const Where& where = Where::current()) {
  emu::hooks::wgmma_wait(N, where);
}
template <i32 R>
void fence_operands(float (&)[R]) {}
template <i32 R>
void fence_operands(u32 (&)[R]) {}

// The shared-window address of the emulator is the offset in its dynamic
// shared memory.
inline u64 advance(u64 descriptor, u32 bytes) { return sm90::advance_descriptor(descriptor, bytes); }

inline u64 descriptor(const void* smem, u32 leading_bytes, u32 stride_bytes, sm90::Swizzle swizzle) {
  sm90::MatrixDescriptor d;
  d.start = static_cast<u32>(static_cast<const unsigned char*>(smem) - emu::hooks::shared_base());
  d.leading_bytes = leading_bytes;
  d.stride_bytes = stride_bytes;
  d.swizzle = swizzle;
  return sm90::encode_descriptor(d);
}

template <class D, i32 kN, i32 kTransA, i32 kTransB>
void mma_ss(float (&d)[kN / 2], u64 desc_a, u64 desc_b, i32 accumulate, const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma(std::is_same_v<D, Bf16>, kN, kTransA != 0, kTransB != 0, desc_a, desc_b, nullptr, d, accumulate,
                    where);
}

// The A registers are the caller's: the emulator checks they are left alone
// until the wait.
template <class D, i32 kN, i32 kTransB>
void mma_rs(float (&d)[kN / 2], const u32 (&a)[4], u64 desc_b, i32 accumulate, const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma(std::is_same_v<D, Bf16>, kN, false, kTransB != 0, 0, desc_b, const_cast<u32*>(a), d, accumulate,
                    where);
}

// The same two with the accumulators as mma.sync's C fragment of a warp.
template <class D, i32 kN, i32 kTransA, i32 kTransB>
void mma_ss(float (&d)[1][kN / 8][4], u64 desc_a, u64 desc_b, i32 accumulate, const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma(std::is_same_v<D, Bf16>, kN, kTransA != 0, kTransB != 0, desc_a, desc_b, nullptr, &d[0][0][0],
                    accumulate, where);
}
template <class D, i32 kN, i32 kTransB>
void mma_rs(float (&d)[1][kN / 8][4], const u32 (&a)[4], u64 desc_b, i32 accumulate,
            const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma(std::is_same_v<D, Bf16>, kN, false, kTransB != 0, 0, desc_b, const_cast<u32*>(a), &d[0][0][0],
                    accumulate, where);
}

// 8-bit inputs (e4m3, e5m2): D[64 x N] (+)= A[64 x 32] * B[32 x N], both
// K-major (the ISA has no transposition for 8-bit types); A from shared
// memory or from registers (sm90::a_fragment_row, a8_fragment_col).
template <Fp8 F, i32 kN>
void mma_ss_fp8(float (&d)[kN / 2], u64 desc_a, u64 desc_b, i32 accumulate, const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma_fp8(F == Fp8::kE4M3 ? 1 : 2, kN, desc_a, desc_b, nullptr, d, accumulate, where);
}
template <Fp8 F, i32 kN>
void mma_rs_fp8(float (&d)[kN / 2], const u32 (&a)[4], u64 desc_b, i32 accumulate,
                const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma_fp8(F == Fp8::kE4M3 ? 1 : 2, kN, 0, desc_b, const_cast<u32*>(a), d, accumulate, where);
}
template <Fp8 F, i32 kN>
void mma_ss_fp8(float (&d)[1][kN / 8][4], u64 desc_a, u64 desc_b, i32 accumulate,
                const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma_fp8(F == Fp8::kE4M3 ? 1 : 2, kN, desc_a, desc_b, nullptr, &d[0][0][0], accumulate, where);
}
template <Fp8 F, i32 kN>
void mma_rs_fp8(float (&d)[1][kN / 8][4], const u32 (&a)[4], u64 desc_b, i32 accumulate,
                const Where& where = Where::current()) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  emu::hooks::wgmma_fp8(F == Fp8::kE4M3 ? 1 : 2, kN, 0, desc_b, const_cast<u32*>(a), &d[0][0][0], accumulate, where);
}

}  // namespace wgmma

namespace registers {
template <i32 R>
void increase(const Where& where = Where::current()) {
  emu::hooks::setmaxnreg(true, R, where);
}
template <i32 R>
void decrease(const Where& where = Where::current()) {
  emu::hooks::setmaxnreg(false, R, where);
}
}  // namespace registers

inline void fence_proxy_async(const Where& where = Where::current()) { emu::hooks::fence_proxy_async(where); }

// An mbarrier lives in 8 bytes of shared memory; the emulator keeps its state
// beside it, by offset (emulator/barriers.cpp).
namespace mbarrier {
inline void init(u64* bar, i32 count, const Where& where = Where::current()) {
  emu::hooks::mbarrier_init(bar, count, where);
}
inline void fence_init() {}
inline void arrive(u64* bar, const Where& where = Where::current()) { emu::hooks::mbarrier_arrive(bar, 0, where); }
inline void arrive_expect_tx(u64* bar, u32 bytes, const Where& where = Where::current()) {
  emu::hooks::mbarrier_arrive(bar, bytes, where);
}
inline void expect_tx(u64* bar, u32 bytes, const Where& where = Where::current()) {
  emu::hooks::mbarrier_expect_tx(bar, bytes, where);
}
// The emulator's try_wait blocks until the phase completes (a deadlock is
// reported, never spun on): a caller's retry loop sees true at once.
inline bool try_wait(u64* bar, u32 parity, const Where& where = Where::current()) {
  emu::hooks::mbarrier_wait(bar, parity, where);
  return true;
}
inline void wait(u64* bar, u32 parity, const Where& where = Where::current()) {
  emu::hooks::mbarrier_wait(bar, parity, where);
}
inline void invalidate(u64* bar, const Where& where = Where::current()) { emu::hooks::mbarrier_invalidate(bar, where); }
// The emulator checks the peer block's init happened before (cluster::sync)
// and that the peer has not exited.
inline void arrive_cluster(u64* bar, i32 cta, const Where& where = Where::current()) {
  emu::hooks::mbarrier_arrive_cluster(bar, cta, where);
}
}  // namespace mbarrier

namespace named_barrier {
inline void sync(i32 id, i32 threads, const Where& where = Where::current()) {
  emu::hooks::named_barrier(id, threads, true, where);
}
inline void arrive(i32 id, i32 threads, const Where& where = Where::current()) {
  emu::hooks::named_barrier(id, threads, false, where);
}
}  // namespace named_barrier

inline bool elect_one(const Where& where = Where::current()) { return emu::hooks::elect_one(where); }

// TMA: a load lands as late as the ISA allows (once its mbarrier has every
// arrival and only its bytes are missing); a store reads shared memory at
// the wait_read that covers it.
namespace tma {
inline void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, const Where& where = Where::current()) {
  const i32 c[] = {c0, c1};
  emu::hooks::tma_load(smem, map, bar, c, 2, where);
}
inline void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2,
                 const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2};
  emu::hooks::tma_load(smem, map, bar, c, 3, where);
}
inline void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3,
                 const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3};
  emu::hooks::tma_load(smem, map, bar, c, 4, where);
}
inline void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4,
                 const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3, c4};
  emu::hooks::tma_load(smem, map, bar, c, 5, where);
}
inline void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, const Where& where = Where::current()) {
  const i32 c[] = {c0, c1};
  emu::hooks::tma_store(map, smem, c, 2, where);
}
inline void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2,
                  const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2};
  emu::hooks::tma_store(map, smem, c, 3, where);
}
inline void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3,
                  const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3};
  emu::hooks::tma_store(map, smem, c, 4, where);
}
inline void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4,
                  const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3, c4};
  emu::hooks::tma_store(map, smem, c, 5, where);
}
inline void load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, i32 c0, i32 c1,
                           const Where& where = Where::current()) {
  const i32 c[] = {c0, c1};
  emu::hooks::tma_load_multicast(smem, map, bar, cta_mask, c, 2, where);
}
inline void load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, i32 c0, i32 c1, i32 c2, i32 c3,
                           const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3};
  emu::hooks::tma_load_multicast(smem, map, bar, cta_mask, c, 4, where);
}
inline void commit(const Where& where = Where::current()) { emu::hooks::tma_commit(where); }
template <i32 N>
void wait_read(const Where& where = Where::current()) {
  emu::hooks::tma_wait_read(N, where);
}
template <i32 N>
void wait(const Where& where = Where::current()) {
  emu::hooks::tma_wait(N, where);
}
inline void reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2,
                       const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2};
  emu::hooks::tma_reduce_add(map, smem, c, 3, false, where);
}
inline void ordered_reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2,
                               const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2};
  emu::hooks::tma_reduce_add(map, smem, c, 3, true, where);
}
inline void reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4,
                       const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3, c4};
  emu::hooks::tma_reduce_add(map, smem, c, 5, false, where);
}
inline void ordered_reduce_add(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4,
                               const Where& where = Where::current()) {
  const i32 c[] = {c0, c1, c2, c3, c4};
  emu::hooks::tma_reduce_add(map, smem, c, 5, true, where);
}
inline void prefetch(const TensorMap* map, const Where& where = Where::current()) {
  emu::hooks::tma_prefetch(map, where);
}
}  // namespace tma

// Thread block clusters: the emulator runs a cluster's blocks together.
namespace cluster {
inline i32 rank() { return emu::hooks::cluster_rank(); }
inline i32 size() { return emu::hooks::cluster_size(); }
inline void sync(const Where& where = Where::current()) { emu::hooks::cluster_sync(where); }
}  // namespace cluster

}  // namespace attune::dev
