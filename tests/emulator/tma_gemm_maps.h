// The tensor maps tma_gemm.cuh moves its operands through, for the emulator's
// test and the GPU's: A [128, k] and B^T [kN, k] of 2-byte elements in
// swizzled boxes of one swizzle row of K, C [128, kN] float in boxes of 64
// rows. `encode` makes each map (the emulator's encoder or the driver's).
#pragma once

#include "core/tensor_map.h"
#include "tests/emulator/tma_gemm.cuh"

namespace attune::testing {

template <i32 kN, sm90::Swizzle kSwizzle, class Encode>
test_kernels::TmaGemmParams tma_gemm_maps(const void* a, const void* bt, void* c, i32 k, Encode encode) {
  using L = test_kernels::TmaGemmLayout<kN, kSwizzle, 2>;
  test_kernels::TmaGemmParams p{};
  TensorMapSpec ma;
  ma.address = a;
  ma.dims = {static_cast<u64>(k), 128, 1, 1, 1};
  ma.strides = {static_cast<u64>(k) * 2, 0, 0, 0};
  ma.box = {static_cast<u32>(L::kTileK), 128, 1, 1, 1};
  ma.swizzle = kSwizzle;
  p.a = encode(ma);
  TensorMapSpec mb = ma;
  mb.address = bt;
  mb.dims[1] = kN;
  mb.box[1] = kN;
  p.b = encode(mb);
  TensorMapSpec mc;
  mc.address = c;
  mc.element_bytes = 4;
  mc.dims = {kN, 128, 1, 1, 1};
  mc.strides = {kN * 4, 0, 0, 0};
  mc.box = {kN, 64, 1, 1, 1};
  p.c = encode(mc);
  return p;
}

}  // namespace attune::testing
