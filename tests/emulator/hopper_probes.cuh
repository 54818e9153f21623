// Small kernels that probe one Hopper primitive each, for the first GPU run
// (tests/runtime/hopper_gpu_test.cpp runs them on the hardware and on the
// emulator with the same inputs and compares what they record):
//
//   mbarrier_probe  try_wait of both parities on a fresh barrier and after
//                   each of four completed phases (the parity rule the ring
//                   pipelines rest on)
//   tma_probe       one 128-byte-swizzled TMA load of a 64 x 64 16-bit tile,
//                   the shared bytes as they landed copied out raw, then the
//                   same tile stored back by TMA into a second tensor
//   wait_forever    a wait on a phase that never completes (the bounded
//                   wait's trap and report)
//   write_report    (GPU, wait-bound builds) a report written through the
//                   slot without a trap: the path from kernel to host alone
#pragma once

#include "templates/primitives/hopper.h"

namespace attune::test_kernels {

// The shared-memory address of `p` on the GPU (where the hardware put the
// dynamic shared memory); the emulator has no such address: ~0.
ATTUNE_DEVICE u32 shared_address_or_none(const void* p) {
#if defined(ATTUNE_CUDA)
  return dev::shared_address(p);
#else
  (void)p;
  return ~0U;
#endif
}

// Thread 0 (`t`) initialises the barrier at `bar` for `count` arrivals; the
// block syncs, so every thread sees it initialised.
ATTUNE_DEVICE void init_barrier_for_block(u64* bar, i32 count, i32 t) {
  if (t == 0) {
    dev::mbarrier::init(bar, count);
    dev::mbarrier::fence_init();
  }
  dev::block::sync();
}

struct MbarrierProbeParams {
  u32* out;  // [2 + 2 * phases] results, then the barrier's shared address
};

// try_wait on a phase that has not completed: false on the GPU (after its
// time limit); the emulator's try_wait blocks until completion, so it would
// report a deadlock there and the slot says "not modelled" (~0) instead.
ATTUNE_DEVICE u32 try_wait_incomplete(u64* bar, u32 parity) {
#if defined(ATTUNE_CUDA)
  return dev::mbarrier::try_wait(bar, parity) ? 1U : 0U;
#else
  (void)bar;
  (void)parity;
  return ~0U;
#endif
}

// 64 threads: every thread arrives once per phase (count 64).
template <i32 kPhases>
ATTUNE_KERNEL void mbarrier_probe(MbarrierProbeParams p) {
  u64* bar = dev::shared_memory<u64>();
  const i32 t = dev::linear_thread();
  init_barrier_for_block(bar, 64, t);
  if (t == 0) {
    // The phase "before the first" (parity 1) counts as complete; phase 0 is not.
    dev::store_global(p.out + 0, dev::mbarrier::try_wait(bar, 1) ? 1U : 0U);
    dev::store_global(p.out + 1, try_wait_incomplete(bar, 0));
    dev::store_global(p.out + 2 + 2 * kPhases, shared_address_or_none(bar));
  }
  dev::block::sync();
  for (i32 phase = 0; phase < kPhases; ++phase) {
    dev::mbarrier::arrive(bar);
    dev::mbarrier::wait(bar, static_cast<u32>(phase & 1));
    dev::block::sync();
    if (t == 0) {
      dev::store_global(p.out + 2 + 2 * phase,
                        1U);  // its wait returned (waiting again is a misuse the emulator reports)
      dev::store_global(p.out + 3 + 2 * phase, try_wait_incomplete(bar, static_cast<u32>((phase + 1) & 1)));
    }
    dev::block::sync();
  }
}

struct TmaProbeParams {
  TensorMap in;   // [64 rows, 64 elements] of 16 bits, box {64, 64}, 128-byte swizzle
  TensorMap out;  // the same shape in another tensor: the TMA store's target
  u32* raw;       // [2048] the shared tile's words as the load left them, then [2048] the tile's shared address
};

inline constexpr i32 kTmaProbeTileBytes = 64 * 128;
inline constexpr i64 kTmaProbeSharedBytes = 1024 + kTmaProbeTileBytes;

// 128 threads; the barrier in the first 1024 bytes, the tile on a swizzle atom.
template <i32 kUnused>
ATTUNE_KERNEL void tma_probe(const ATTUNE_GRID_CONSTANT TmaProbeParams p) {
  unsigned char* smem = dev::shared_memory<unsigned char>();
  u64* full = reinterpret_cast<u64*>(smem);
  unsigned char* tile = smem + 1024;
  const i32 t = dev::linear_thread();
  init_barrier_for_block(full, 1, t);
  if (t == 0) {
    dev::mbarrier::arrive_expect_tx(full, kTmaProbeTileBytes);
    dev::tma::load(tile, &p.in, full, 0, 0);
  }
  dev::mbarrier::wait(full, 0);
  const u32* words = reinterpret_cast<const u32*>(tile);
  for (i32 i = t; i < kTmaProbeTileBytes / 4; i += 128)
    dev::store_global(p.raw + (i), static_cast<u32>(dev::load_shared<u32>(words + i)));
  if (t == 0) dev::store_global(p.raw + (kTmaProbeTileBytes / 4), static_cast<u32>(shared_address_or_none(tile)));
  dev::fence_proxy_async();
  dev::block::sync();
  if (t == 0) {
    dev::tma::store(&p.out, tile, 0, 0);
    dev::tma::commit();
    dev::tma::wait_read<0>();
  }
}

struct WaitForeverParams {
  u32* out;
};

// A barrier of count 2 that only one thread arrives at: phase 0 never completes.
template <i32 kUnused>
ATTUNE_KERNEL void wait_forever(WaitForeverParams p) {
  u64* bar = dev::shared_memory<u64>();
  const i32 t = dev::linear_thread();
  init_barrier_for_block(bar, 2, t);
  if (t == 0) dev::mbarrier::arrive(bar);
  dev::mbarrier::wait(bar, 0);
  dev::store_global(p.out + (t), static_cast<u32>(1));
}

#if defined(ATTUNE_CUDA) && defined(ATTUNE_WAIT_BOUND_MS)
// out[0]: 1 when the kernel sees the slot the runtime installed.
template <i32 kUnused>
ATTUNE_KERNEL void write_report(WaitForeverParams p) {
  WaitReport* r = attune_wait_report;
  if (dev::linear_thread() == 0) {
    dev::store_global(p.out, r != nullptr ? 1U : 0U);
    if (r != nullptr) {
      volatile WaitReport* v = r;
      v->block[0] = 7;
      v->thread = 33;
      v->barrier = 0x400;
      v->parity = 1;
      v->state = 1;
      v->waited_ns = 1000000;
      v->bound_ms = ATTUNE_WAIT_BOUND_MS;
      __threadfence_system();
      v->magic = kWaitReportMagic;
      __threadfence_system();
    }
  }
}
#endif

}  // namespace attune::test_kernels
