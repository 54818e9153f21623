// 16-bit element bits and their values, for the GEMM tests of the emulator and
// of the GPU (tests/runtime/hopper_gpu_test.cpp).
#pragma once

#include <bit>
#include <type_traits>

#include "core/dtype.h"
#include "templates/primitives/config.h"

namespace attune::testing {

template <class D>
u16 bits_of(float x) {
  return std::is_same_v<D, Bf16> ? float_to_bfloat16_bits(x) : float_to_half_bits(x);
}
template <class D>
double value_of(u16 bits) {
  return std::is_same_v<D, Bf16> ? static_cast<double>(std::bit_cast<float>(static_cast<u32>(bits) << 16))
                                 : static_cast<double>(half_bits_to_float(bits));
}

}  // namespace attune::testing
