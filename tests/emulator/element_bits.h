// Element bits and their values, for the GEMM tests of the emulator and of
// the GPU (tests/runtime/hopper_gpu_test.cpp): 16-bit patterns, and random
// fp8 bytes.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <random>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "templates/fp8.h"
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

// `count` random bytes of format F standing for finite values of magnitude
// at most 16 (products and sums stay far from the formats' limits).
template <Fp8 F>
std::vector<u8> finite_fp8_bytes(std::size_t count, std::mt19937& rng) {
  std::vector<u8> bytes(count);
  for (u8& b : bytes) {
    do {
      b = static_cast<u8>(rng() & 0xFFU);
    } while (!std::isfinite(fp8_to_float(b, F)) || std::abs(fp8_to_float(b, F)) > 16.0F);
  }
  return bytes;
}

}  // namespace attune::testing
