// Storage dtypes of the operator contract and their host conversions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace attune {

// Storage dtype of Q, K, V and O. Accumulation is always fp32 (fp64 in the
// reference).
enum class DType : std::uint8_t { kF16, kBF16 };

// Canonical names: "fp16", "bf16" (used by the CLI, variant ids and the
// tuning database).
std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

// Bytes of one stored element.
constexpr int element_bytes(DType /*dtype*/) { return 2; }

// Round-to-nearest-even conversions. Inf is preserved; NaN stays NaN (the
// payload is not preserved, as on the hardware).
std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(std::uint16_t bits);

// The storage-dtype pair of the two above, chosen by `dtype`.
std::uint16_t float_to_bits(DType dtype, float value);
float bits_to_float(DType dtype, std::uint16_t bits);
// Stored elements widened to T (float or double): outputs copied back for a
// check or a report.
template <class T>
std::vector<T> widen_bits(DType dtype, std::span<const std::uint16_t> bits) {
  std::vector<T> values;
  values.reserve(bits.size());
  for (std::uint16_t b : bits) values.push_back(static_cast<T>(bits_to_float(dtype, b)));
  return values;
}

// Rounds `value` to the nearest representable value of `dtype`.
inline float round_to(DType dtype, float value) { return bits_to_float(dtype, float_to_bits(dtype, value)); }

}  // namespace attune
