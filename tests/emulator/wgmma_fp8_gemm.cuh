// A one-warpgroup GEMM on 8-bit wgmma, C[64 x N] = A[64 x 64] * B[64 x N]
// with A and B in e4m3 or e5m2, for the emulator's tests and the sm_90a
// compile check: both operands stored K-major (the only form 8-bit wgmma
// reads) in the canonical layout of their descriptors (hopper_layout.h with
// 1-byte elements), two wgmmas of K = 32 into one accumulator; A from shared
// memory or from registers (sm90::a8_fragment_col).
#pragma once

#include "templates/primitives/hopper.h"
#include "tests/emulator/wgmma_gemm.cuh"

namespace attune::test_kernels {

struct Fp8GemmParams {
  const u8* a;   // [64, 64], row-major (K contiguous)
  const u8* bt;  // [N, 64]: B transposed, K contiguous
  float* c;      // [64, N]
};

template <Fp8 F, i32 kN, sm90::Swizzle kSwizzle, bool kARegisters>
ATTUNE_KERNEL void wgmma_fp8_gemm(Fp8GemmParams p) {
  constexpr i32 kSteps = 2;
  // One K step of 32 bytes per row: the 16-bit GEMM's regions hold it (16
  // elements of 2 bytes there), K-major.
  constexpr u32 kA = gemm_region_bytes(64, kSwizzle, false);
  constexpr u32 kB = gemm_region_bytes(kN, kSwizzle, false);
  unsigned char* smem = dev::shared_memory<unsigned char>();
  const i32 t = dev::linear_thread();
  for (i32 s = 0; s < kSteps; ++s) {
    const sm90::MatrixDescriptor a = gemm_region_layout(s * (kA + kB), kSwizzle, false);
    const sm90::MatrixDescriptor b = gemm_region_layout(s * (kA + kB) + kA, kSwizzle, false);
    for (i32 e = t; e < 64 * 32; e += 128) {
      const i32 m = e / 32, k = e % 32;
      dev::store_shared(smem + sm90::operand_shared_address(a, sm90::Major::kK, m, k, 1),
                        dev::load_global(p.a + m * 64 + s * 32 + k));
    }
    for (i32 e = t; e < kN * 32; e += 128) {
      const i32 n = e / 32, k = e % 32;
      dev::store_shared(smem + sm90::operand_shared_address(b, sm90::Major::kK, n, k, 1),
                        dev::load_global(p.bt + n * 64 + s * 32 + k));
    }
  }
  dev::fence_proxy_async();
  dev::block::sync();

  u32 a_registers[kSteps][4] = {};
  if constexpr (kARegisters) {
    for (i32 s = 0; s < kSteps; ++s) {
      for (i32 q = 0; q < 4; ++q) {
        const i32 row = sm90::a_fragment_row(t, q);
        u32 word = 0;
        for (i32 h = 0; h < 4; ++h) {
          word |= static_cast<u32>(dev::load_global(p.a + row * 64 + s * 32 + sm90::a8_fragment_col(t, q, h)))
                  << (8 * h);
        }
        a_registers[s][q] = word;
      }
    }
  }
  float d[kN / 2];
  for (i32 i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  dev::wgmma::fence();
  for (i32 s = 0; s < kSteps; ++s) {
    const u32 base = static_cast<u32>(s) * (kA + kB);
    const sm90::MatrixDescriptor layout = gemm_region_layout(0, kSwizzle, false);
    const u64 desc_b = dev::wgmma::descriptor(smem + base + kA, layout.leading_bytes, layout.stride_bytes, kSwizzle);
    if constexpr (kARegisters) {
      dev::wgmma::mma_rs_fp8<F, kN>(d, a_registers[s], desc_b, s);
    } else {
      const u64 desc_a = dev::wgmma::descriptor(smem + base, layout.leading_bytes, layout.stride_bytes, kSwizzle);
      dev::wgmma::mma_ss_fp8<F, kN>(d, desc_a, desc_b, s);
    }
  }
  dev::wgmma::commit();
  dev::wgmma::wait<0>();
  for (i32 i = 0; i < kN / 2; ++i) {
    dev::store_global(p.c + sm90::accumulator_row(t, i) * kN + sm90::accumulator_col(t, i), d[i]);
  }
}

template <i32 kN, sm90::Swizzle kSwizzle>
ATTUNE_HOST_DEVICE constexpr i64 fp8_gemm_shared_bytes() {
  return 2 * static_cast<i64>(gemm_region_bytes(64, kSwizzle, false) + gemm_region_bytes(kN, kSwizzle, false));
}

}  // namespace attune::test_kernels
