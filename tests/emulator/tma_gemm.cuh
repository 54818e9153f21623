// A warp-specialized GEMM, C[128 x N] = A[128 x K] * B[K x N] (B given as
// B^T, [N x K]): one producer warpgroup loads K tiles of A and B through TMA
// into a ring of kStages swizzled stages with full/empty mbarriers; two
// consumer warpgroups (64 rows each) wait for a stage, where only the first
// consumer warp waits on the mbarrier and hands off to the rest through a
// named barrier, run wgmma on it and release it; registers move from the
// producer to the consumers with setmaxnreg; C leaves through shared memory
// and a TMA store. For the emulator's tests and the sm_90a compile check;
// `plant` switches in one bug per detector ("planted:" marks the lines).
#pragma once

#include "templates/primitives/hopper.h"

namespace attune::test_kernels {

enum TmaPlant : i32 {
  kTmaPlantNone = 0,
  kTmaPlantNoHandOff,         // consumers read the stage without the named barrier after the wait
  kTmaPlantWrongParity,       // consumers wait with the parity of the previous lap
  kTmaPlantEarlyRelease,      // a stage released before the wgmma that reads it is waited for
  kTmaPlantNoRelease,         // a stage never released: the producer waits for ever
  kTmaPlantTxMismatch,        // expect_tx announces fewer bytes than the loads bring
  kTmaPlantStoreNoFence,      // C staged with ordinary stores, no fence.proxy.async before the TMA store
  kTmaPlantStoreNoBarrier,    // the TMA store issued before the other threads' C stores
  kTmaPlantMisalignedStage,   // a stage buffer 128 bytes off its swizzle atom
  kTmaPlantTooManyRegisters,  // consumers take 240 registers: 66,560 in the block
};

struct TmaGemmParams {
  TensorMap a;  // [128, K] bf16/fp16, box {span/2, 128}
  TensorMap b;  // [N, K], box {span/2, N}
  TensorMap c;  // [128, N] fp32, box {N, 64}
  i32 k_tiles;
  i32 plant;
};

template <i32 kN, sm90::Swizzle kSwizzle, i32 kStages>
struct TmaGemmLayout {
  static constexpr i32 kSpan = sm90::swizzle_span(kSwizzle);
  static constexpr i32 kTileK = kSpan / 2;  // elements of K per stage: one swizzled row
  static constexpr i32 kABytes = 128 * kSpan;
  static constexpr i32 kBBytes = kN * kSpan;
  static constexpr i32 kStageBytes = kABytes + kBBytes;
  static constexpr i32 kBarrierBytes = 1024;  // full[kStages], empty[kStages]; stages start at an atom
  static constexpr i32 kCOffset = kBarrierBytes + kStages * kStageBytes;
  static constexpr i64 kSharedBytes = kCOffset + 128 * kN * 4;
};

template <class D, i32 kN, sm90::Swizzle kSwizzle, i32 kStages>
ATTUNE_KERNEL void ATTUNE_LAUNCH_BOUNDS(384, 1) tma_gemm(const ATTUNE_GRID_CONSTANT TmaGemmParams p) {
  using L = TmaGemmLayout<kN, kSwizzle, kStages>;
  unsigned char* smem = dev::shared_memory<unsigned char>();
  u64* full = reinterpret_cast<u64*>(smem);
  u64* empty = full + kStages;
  const i32 misaligned = p.plant == kTmaPlantMisalignedStage ? 128 : 0;  // planted: off the atom
  const auto stage = [&](i32 s) { return smem + L::kBarrierBytes + s * L::kStageBytes + misaligned; };
  const i32 t = dev::linear_thread();
  if (t == 0) {
    for (i32 s = 0; s < kStages; ++s) {
      dev::mbarrier::init(full + s, 1);
      dev::mbarrier::init(empty + s, 2);
    }
    dev::mbarrier::fence_init();
  }
  dev::block::sync();
  const i32 wg = dev::warpgroup::index();
  if (wg == 0) {
    dev::registers::decrease<40>();
    if (dev::warp_id() == 0 && dev::elect_one()) {
      dev::tma::prefetch(&p.a);
      dev::tma::prefetch(&p.b);
      const u32 announced = p.plant == kTmaPlantTxMismatch ? L::kStageBytes - 16 : L::kStageBytes;
      for (i32 kt = 0; kt < p.k_tiles; ++kt) {
        const i32 s = kt % kStages;
        const u32 lap = static_cast<u32>(kt / kStages);
        dev::mbarrier::wait(empty + s, (lap & 1) ^ 1);  // producer: wait empty
        dev::mbarrier::arrive_expect_tx(full + s, announced);
        dev::tma::load(stage(s), &p.a, full + s, kt * L::kTileK, 0);               // producer: load A
        dev::tma::load(stage(s) + L::kABytes, &p.b, full + s, kt * L::kTileK, 0);  // producer: load B
      }
    }
    return;
  }
  if (p.plant == kTmaPlantTooManyRegisters) {
    dev::registers::increase<240>();  // planted: too many registers
  } else {
    dev::registers::increase<232>();
  }
  const i32 row0 = (wg - 1) * 64;
  float d[kN / 2];
  for (i32 i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  for (i32 kt = 0; kt < p.k_tiles; ++kt) {
    const i32 s = kt % kStages;
    const u32 lap = static_cast<u32>(kt / kStages);
    if (dev::warp_id() == 4) {
      const u32 parity = p.plant == kTmaPlantWrongParity ? (lap & 1) ^ 1 : lap & 1;
      dev::mbarrier::wait(full + s, parity);  // consumer: wait full
    }
    if (p.plant != kTmaPlantNoHandOff) dev::named_barrier::sync(1, 256);  // consumer: hand-off
    dev::wgmma::fence();
    for (i32 kk = 0; kk < L::kTileK / 16; ++kk) {
      const u64 desc_a = dev::wgmma::descriptor(stage(s) + row0 * L::kSpan + kk * 32, 16, 8 * L::kSpan, kSwizzle);
      const u64 desc_b = dev::wgmma::descriptor(stage(s) + L::kABytes + kk * 32, 16, 8 * L::kSpan, kSwizzle);
      dev::wgmma::mma_ss<D, kN, 0, 0>(d, desc_a, desc_b, kt > 0 || kk > 0);  // consumer: wgmma
    }
    dev::wgmma::commit();
    if (p.plant == kTmaPlantEarlyRelease && dev::warpgroup::thread() == 0) dev::mbarrier::arrive(empty + s);
    dev::wgmma::wait<0>();
    if (p.plant != kTmaPlantEarlyRelease && p.plant != kTmaPlantNoRelease && dev::warpgroup::thread() == 0) {
      dev::mbarrier::arrive(empty + s);  // consumer: release
    }
  }
  // C through shared memory (fp32, row-major) and one TMA store per warpgroup.
  float* c = reinterpret_cast<float*>(smem + L::kCOffset);
  for (i32 i = 0; i < kN / 2; ++i) {
    const i32 r = row0 + sm90::accumulator_row(dev::warpgroup::thread(), i);
    dev::store_shared(c + r * kN + sm90::accumulator_col(dev::warpgroup::thread(), i), d[i]);  // consumer: stage C
  }
  if (p.plant != kTmaPlantStoreNoFence) dev::fence_proxy_async();
  if (p.plant != kTmaPlantStoreNoBarrier) dev::named_barrier::sync(1 + wg, 128);
  if (dev::warpgroup::thread() == 0) {
    dev::tma::store(&p.c, c + row0 * kN, 0, row0);  // consumer: store C
    dev::tma::commit();
    dev::tma::wait_read<0>();
  }
}

}  // namespace attune::test_kernels
