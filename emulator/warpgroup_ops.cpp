#include "emulator/warpgroup_ops.h"

#include <bit>

#include "core/dtype.h"
#include "templates/fp8.h"

namespace attune::emu {

namespace {

using sm90::Major;

// An index into a vector (the products are small and non-negative).
std::size_t at(i32 i) { return static_cast<std::size_t>(i); }

float element(const WgmmaShape& s, u16 bits) {
  if (s.fp8 != 0) return fp8_to_float(static_cast<u8>(bits), s.fp8 == 1 ? Fp8::kE4M3 : Fp8::kE5M2);
  return s.bf16 ? std::bit_cast<float>(static_cast<u32>(bits) << 16) : half_bits_to_float(bits);
}

u32 a_address(const WgmmaShape& s, i32 m, i32 k) {
  return sm90::operand_shared_address(sm90::decode_descriptor(s.desc_a), s.trans_a ? Major::kMN : Major::kK, m, k,
                                      wgmma_element_bytes(s));
}
u32 b_address(const WgmmaShape& s, i32 n, i32 k) {
  return sm90::operand_shared_address(sm90::decode_descriptor(s.desc_b), s.trans_b ? Major::kMN : Major::kK, n, k,
                                      wgmma_element_bytes(s));
}

// Element (m, k) of a register A operand: the thread and register that hold
// it (the inverse of sm90::a_fragment_row/col, or a8_fragment_col's).
u16 a_from_registers(const WgmmaShape& s, const WarpgroupARegisters& a, i32 m, i32 k) {
  if (s.fp8 != 0) {
    const i32 t = 32 * (m / 16) + 4 * (m % 8) + (k % 16) / 4;
    const i32 q = (m % 16) / 8 + 2 * (k / 16);
    return static_cast<u16>((a[static_cast<std::size_t>(t)][static_cast<std::size_t>(q)] >> (8 * (k % 4))) & 0xFFU);
  }
  const i32 t = 32 * (m / 16) + 4 * (m % 8) + (k % 8) / 2;
  const i32 q = (m % 16) / 8 + 2 * (k / 8);
  const u32 word = a[static_cast<std::size_t>(t)][static_cast<std::size_t>(q)];
  return static_cast<u16>(k % 2 == 0 ? word & 0xFFFFU : word >> 16);
}

}  // namespace

std::vector<u32> wgmma_operand_addresses(const WgmmaShape& shape) {
  std::vector<u32> out;
  const i32 k_size = wgmma_k(shape);
  out.reserve(at((shape.n + sm90::kWgmmaM) * k_size));
  for (i32 n = 0; n < shape.n; ++n) {
    for (i32 k = 0; k < k_size; ++k) out.push_back(b_address(shape, n, k));
  }
  if (!shape.a_in_registers) {
    for (i32 m = 0; m < sm90::kWgmmaM; ++m) {
      for (i32 k = 0; k < k_size; ++k) out.push_back(a_address(shape, m, k));
    }
  }
  return out;
}

void wgmma_compute(const WgmmaShape& shape, const std::function<u16(u32)>& read_u16, const WarpgroupARegisters& a,
                   bool accumulate, std::vector<std::vector<float>>& acc) {
  constexpr i32 kM = sm90::kWgmmaM;
  const i32 k_size = wgmma_k(shape);
  std::vector<float> a_values(static_cast<std::size_t>(kM * k_size));
  for (i32 m = 0; m < kM; ++m) {
    for (i32 k = 0; k < k_size; ++k) {
      const u16 bits = shape.a_in_registers ? a_from_registers(shape, a, m, k) : read_u16(a_address(shape, m, k));
      a_values[at(m * k_size + k)] = element(shape, bits);
    }
  }
  std::vector<float> b_values(static_cast<std::size_t>(shape.n * k_size));
  for (i32 n = 0; n < shape.n; ++n) {
    for (i32 k = 0; k < k_size; ++k) b_values[at(n * k_size + k)] = element(shape, read_u16(b_address(shape, n, k)));
  }
  for (i32 t = 0; t < sm90::kWarpgroupSize; ++t) {
    std::vector<float>& d = acc[static_cast<std::size_t>(t)];
    for (i32 i = 0; i < shape.n / 2; ++i) {
      const i32 row = sm90::accumulator_row(t, i);
      const i32 col = sm90::accumulator_col(t, i);
      float sum = accumulate ? d[static_cast<std::size_t>(i)] : 0.0F;
      for (i32 k = 0; k < k_size; ++k) {
        sum += a_values[at(row * k_size + k)] * b_values[at(col * k_size + k)];
      }
      d[static_cast<std::size_t>(i)] = sum;
    }
  }
}

}  // namespace attune::emu
