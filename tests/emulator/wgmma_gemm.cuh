// A one-warpgroup GEMM on wgmma, C[64 x N] = A[64 x 32] * B[32 x N], for the
// emulator's tests and the sm_90a compile check: the 128 threads store both
// operands into shared memory in the canonical layout of their descriptors
// (hopper_layout.h), order those stores for the async proxy, and issue two
// wgmmas (K = 16 each) into one accumulator. `plant` switches in one bug
// per emulator detector; the tests find the lines by their "planted:" marks.
#pragma once

#include "templates/primitives/hopper.h"

namespace attune::test_kernels {

enum Plant : i32 {
  kPlantNone = 0,
  kPlantNoProxyFence,          // operands stored, no fence.proxy.async
  kPlantNoWgmmaFence,          // no wgmma.fence before the first wgmma
  kPlantAccumulatorWritten,    // an accumulator written while in flight
  kPlantOperandOverwritten,    // shared operand bytes stored to while in flight
  kPlantDivergentDescriptor,   // one warp passes another B descriptor
  kPlantIllegalRegisterCount,  // setmaxnreg 100
  kPlantAccumulatorRead,       // an accumulator stored before the wait
  kPlantWarpSkipsWgmma,        // the last warp of the warpgroup skips the wgmmas
};

struct GemmParams {
  const u16* a;  // [64, 32], row-major
  const u16* b;  // [32, N], row-major
  float* c;      // [64, N]
  i32 plant;
};

// Bytes of one operand's region (one K step of 16) in shared memory, whole
// swizzle atoms, and its descriptor fields relative to the region's start.
ATTUNE_HOST_DEVICE constexpr u32 gemm_region_bytes(i32 rows, sm90::Swizzle s, bool mn_major) {
  const u32 span = static_cast<u32>(sm90::swizzle_span(s));
  u32 bytes = 0;
  if (s == sm90::Swizzle::kNone) {
    bytes = static_cast<u32>((rows + 7) / 8) * 256;  // two core matrices of 128 bytes per 8 rows
  } else if (!mn_major) {
    bytes = static_cast<u32>(rows) * span;
  } else {
    bytes = (rows + span / 2 - 1) / (span / 2) * 16 * span;  // atoms of span / 2 elements x 16 K-rows
  }
  return (bytes + 1023) / 1024 * 1024;
}

// LBO and SBO of a region (see operand_address).
ATTUNE_HOST_DEVICE constexpr sm90::MatrixDescriptor gemm_region_layout(u32 start, sm90::Swizzle s, bool mn_major) {
  const u32 span = static_cast<u32>(sm90::swizzle_span(s));
  sm90::MatrixDescriptor d;
  d.start = start;
  d.swizzle = s;
  if (s == sm90::Swizzle::kNone) {
    d.leading_bytes = 128;  // K-major: the second 8 elements of K; MN-major: the next 8 K-rows
    d.stride_bytes = 256;   // the next 8 rows of M/N
  } else if (!mn_major) {
    d.leading_bytes = 16;  // unused
    d.stride_bytes = 8 * span;
  } else {
    d.leading_bytes = 16 * span;  // the next span / 2 elements of M/N
    d.stride_bytes = 8 * span;    // the next 8 K-rows
  }
  return d;
}

template <class D, i32 kN, sm90::Swizzle kSwizzle, bool kTransA, bool kTransB, bool kARegisters>
ATTUNE_KERNEL void wgmma_gemm(GemmParams p) {
  constexpr i32 kSteps = 2;
  constexpr u32 kA = gemm_region_bytes(64, kSwizzle, kTransA);
  constexpr u32 kB = gemm_region_bytes(kN, kSwizzle, kTransB);
  constexpr sm90::Major kMajorA = kTransA ? sm90::Major::kMN : sm90::Major::kK;
  constexpr sm90::Major kMajorB = kTransB ? sm90::Major::kMN : sm90::Major::kK;
  unsigned char* smem = dev::shared_memory<unsigned char>();
  const i32 t = dev::linear_thread();
#if defined(ATTUNE_EMULATOR)  // the CUDA twin refuses it at compile time
  if (p.plant == kPlantIllegalRegisterCount) dev::registers::increase<100>();  // planted: illegal count
#endif
  for (i32 s = 0; s < kSteps; ++s) {
    const sm90::MatrixDescriptor a = gemm_region_layout(s * (kA + kB), kSwizzle, kTransA);
    const sm90::MatrixDescriptor b = gemm_region_layout(s * (kA + kB) + kA, kSwizzle, kTransB);
    for (i32 e = t; e < 64 * 16; e += 128) {
      const i32 m = e / 16, k = e % 16;
      dev::store_shared(reinterpret_cast<u16*>(smem + sm90::operand_shared_address(a, kMajorA, m, k)),
                        dev::load_global(p.a + m * 32 + s * 16 + k));
    }
    for (i32 e = t; e < kN * 16; e += 128) {
      const i32 n = e / 16, k = e % 16;
      dev::store_shared(reinterpret_cast<u16*>(smem + sm90::operand_shared_address(b, kMajorB, n, k)),
                        dev::load_global(p.b + (s * 16 + k) * kN + n));
    }
  }
  if (p.plant != kPlantNoProxyFence) dev::fence_proxy_async();
  dev::block::sync();

  u32 a_registers[kSteps][4] = {};
  if constexpr (kARegisters) {
    for (i32 s = 0; s < kSteps; ++s) {
      for (i32 q = 0; q < 4; ++q) {
        const i32 row = sm90::a_fragment_row(t, q);
        const u32 lo = dev::load_global(p.a + row * 32 + s * 16 + sm90::a_fragment_col(t, q, 0));
        const u32 hi = dev::load_global(p.a + row * 32 + s * 16 + sm90::a_fragment_col(t, q, 1));
        a_registers[s][q] = lo | (hi << 16);
      }
    }
  }
  float d[kN / 2];
  for (i32 i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  if (p.plant != kPlantNoWgmmaFence) dev::wgmma::fence();
  for (i32 s = 0; s < kSteps && !(p.plant == kPlantWarpSkipsWgmma && dev::warp_id() == 3); ++s) {  // planted: skipped
    const u32 base = static_cast<u32>(s) * (kA + kB);
    const u32 b_offset = p.plant == kPlantDivergentDescriptor && dev::warp_id() == 1 ? 16 : 0;  // planted: B moved
    const u64 desc_b =
        dev::wgmma::descriptor(smem + base + kA + b_offset, gemm_region_layout(0, kSwizzle, kTransB).leading_bytes,
                               gemm_region_layout(0, kSwizzle, kTransB).stride_bytes, kSwizzle);
    if constexpr (kARegisters) {
      dev::wgmma::mma_rs<D, kN, kTransB ? 1 : 0>(d, a_registers[s], desc_b, s);  // wgmma: issue (registers)
    } else {
      const u64 desc_a = dev::wgmma::descriptor(smem + base, gemm_region_layout(0, kSwizzle, kTransA).leading_bytes,
                                                gemm_region_layout(0, kSwizzle, kTransA).stride_bytes, kSwizzle);
      dev::wgmma::mma_ss<D, kN, kTransA ? 1 : 0, kTransB ? 1 : 0>(d, desc_a, desc_b, s);  // wgmma: issue (shared)
    }
  }
  dev::wgmma::commit();
  if (p.plant == kPlantAccumulatorWritten) d[1] = 2.0f;  // planted: written in flight
  if (p.plant == kPlantOperandOverwritten && t == 5)
    dev::store_shared(reinterpret_cast<u16*>(smem + kA), u16{0});          // planted: operand overwritten
  if (p.plant == kPlantAccumulatorRead) dev::store_global(p.c + t, d[0]);  // planted: read in flight
  dev::wgmma::wait<0>();                                                   // wgmma: wait
  for (i32 i = 0; i < kN / 2; ++i) {
    dev::store_global(p.c + sm90::accumulator_row(t, i) * kN + sm90::accumulator_col(t, i), d[i]);
  }
}

template <i32 kN, sm90::Swizzle kSwizzle, bool kTransA, bool kTransB>
ATTUNE_HOST_DEVICE constexpr i64 gemm_shared_bytes() {
  return 2 * static_cast<i64>(gemm_region_bytes(64, kSwizzle, kTransA) + gemm_region_bytes(kN, kSwizzle, kTransB));
}

}  // namespace attune::test_kernels
