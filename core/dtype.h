// Storage dtypes of the operator contract and their host conversions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attune {

// Storage dtype of a tensor. Accumulation is always fp32 (fp64 in the
// reference). The 8-bit float formats (templates/fp8.h) store inputs only:
// Q, K and V of a forward, or a KV cache; what the kernels compute in and
// write is a 16-bit dtype (AttentionProblem::compute_dtype).
enum class DType : std::uint8_t { kF16, kBF16, kE4M3, kE5M2 };

// Canonical names: "fp16", "bf16", "e4m3", "e5m2" (used by the CLI, the
// tuning database and the Python package). parse_dtype also reads torch's
// names ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2").
std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);

// The name of a problem's input storage as the tuning database keys it:
// the dtype ("bf16", "e4m3"), or with a KV cache in another dtype
// "bf16-kv-e4m3". parse_storage_name reads it back, or returns nullopt.
struct StorageName {
  DType dtype;
  std::optional<DType> kv_dtype;  // set only when it differs from dtype
};
std::string storage_name(DType dtype, std::optional<DType> kv_dtype);
std::optional<StorageName> parse_storage_name(std::string_view name);

constexpr bool is_fp8(DType dtype) { return dtype == DType::kE4M3 || dtype == DType::kE5M2; }

// Bytes of one stored element.
constexpr int element_bytes(DType dtype) { return is_fp8(dtype) ? 1 : 2; }

// Round-to-nearest-even conversions. Inf is preserved; NaN stays NaN (the
// payload is not preserved, as on the hardware).
std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(std::uint16_t bits);

// The storage-dtype pair of the two above, chosen by `dtype`; an fp8 dtype's
// byte in the low 8 bits (templates/fp8.h: round to nearest even, saturating
// to the largest finite value as cvt.rn.satfinite does).
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

// Elements held one per 16-bit slot (float_to_bits' results) as the kernels
// read them: 2 little-endian bytes each for fp16 and bf16, the low byte for
// e4m3 and e5m2.
std::vector<std::uint8_t> storage_bytes(DType dtype, std::span<const std::uint16_t> slots);

// Rounds `value` to the nearest representable value of `dtype`.
inline float round_to(DType dtype, float value) { return bits_to_float(dtype, float_to_bits(dtype, value)); }

}  // namespace attune
