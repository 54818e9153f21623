// P V of the Hopper fp8 forward in one warpgroup: P as the S accumulators
// hold it (fp32, mma.sync's C fragment per 8-key tile), rounded to fp8 into
// the A registers by sm90_fp8::pack_p_fp8 with no exchange between threads,
// and V[64 keys x N] transposed into a K-major tile whose slot c of each
// 32-key step holds key p_key(c): C[64 x N] = P V over two k32 wgmmas.
// kPermute false writes V's keys in their own order (the planted bug: P
// would need its permute).
#pragma once

#include "templates/sm90_fp8.cuh"
#include "tests/emulator/wgmma_gemm.cuh"

namespace attune::test_kernels {

struct Fp8PvParams {
  const float* p;  // [64, 64]: row m, key k
  const u8* v;     // [64, N]: key k, column n (fp8)
  float* c;        // [64, N]
};

template <Fp8 F, i32 kN, bool kPermute>
ATTUNE_KERNEL void wgmma_fp8_pv(Fp8PvParams p) {
  constexpr i32 kSteps = 2;
  constexpr u32 kB = gemm_region_bytes(kN, sm90::Swizzle::k128B, false);
  unsigned char* smem = dev::shared_memory<unsigned char>();
  const i32 t = dev::linear_thread();
  const sm90::MatrixDescriptor layout = gemm_region_layout(0, sm90::Swizzle::k128B, false);
  for (i32 s = 0; s < kSteps; ++s) {
    const sm90::MatrixDescriptor b = gemm_region_layout(s * kB, sm90::Swizzle::k128B, false);
    for (i32 e = t; e < kN * 32; e += 128) {
      const i32 n = e / 32, slot = e % 32;
      const i32 key = kPermute ? sm90_fp8::p_key(slot) : slot;
      dev::store_shared(smem + sm90::operand_shared_address(b, sm90::Major::kK, n, slot, 1),
                        dev::load_global(p.v + (s * 32 + key) * kN + n));
    }
  }
  dev::fence_proxy_async();
  dev::block::sync();
  u32 a[kSteps][4];
  for (i32 s = 0; s < kSteps; ++s) {
    float tiles[4][4];
    for (i32 j = 0; j < 4; ++j) {
      for (i32 e = 0; e < 4; ++e) {
        const i32 i = 4 * j + e;  // accumulator register i of a 32-column S
        tiles[j][e] = dev::load_global(p.p + sm90::accumulator_row(t, i) * 64 + s * 32 + sm90::accumulator_col(t, i));
      }
    }
    sm90_fp8::pack_p_fp8<F>(tiles[0], tiles[1], tiles[2], tiles[3], a[s]);
  }
  float d[kN / 2];
  for (i32 i = 0; i < kN / 2; ++i) d[i] = 0.0f;
  dev::wgmma::fence();
  for (i32 s = 0; s < kSteps; ++s) {
    const u64 desc_v =
        dev::wgmma::descriptor(smem + s * kB, layout.leading_bytes, layout.stride_bytes, sm90::Swizzle::k128B);
    dev::wgmma::mma_rs_fp8<F, kN>(d, a[s], desc_v, s);
  }
  dev::wgmma::commit();
  dev::wgmma::wait<0>();
  for (i32 i = 0; i < kN / 2; ++i) {
    dev::store_global(p.c + sm90::accumulator_row(t, i) * kN + sm90::accumulator_col(t, i), d[i]);
  }
}

template <i32 kN>
ATTUNE_HOST_DEVICE constexpr i64 fp8_pv_shared_bytes() {
  return 2 * static_cast<i64>(gemm_region_bytes(kN, sm90::Swizzle::k128B, false));
}

}  // namespace attune::test_kernels
