#include "core/dtype.h"

#include <bit>
#include <cmath>

#include "core/enum_names.h"
#include "templates/fp8.h"

namespace attune {

constexpr NamedValue<DType> kDTypeNames[] = {
    {DType::kF16, "fp16"}, {DType::kBF16, "bf16"}, {DType::kE4M3, "e4m3"}, {DType::kE5M2, "e5m2"}};

std::string_view to_string(DType dtype) { return name_of(kDTypeNames, dtype); }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "e4m3" || name == "float8_e4m3fn" || name == "fp8_e4m3") return DType::kE4M3;
  if (name == "e5m2" || name == "float8_e5m2" || name == "fp8_e5m2") return DType::kE5M2;
  return std::nullopt;
}

constexpr std::string_view kKvInfix = "-kv-";

std::string storage_name(DType dtype, std::optional<DType> kv_dtype) {
  std::string name(to_string(dtype));
  if (kv_dtype && *kv_dtype != dtype) name += std::string(kKvInfix) + std::string(to_string(*kv_dtype));
  return name;
}

std::optional<StorageName> parse_storage_name(std::string_view name) {
  const std::size_t at = name.find(kKvInfix);
  const std::optional<DType> dtype = parse_dtype(name.substr(0, at));
  if (!dtype || to_string(*dtype) != name.substr(0, at)) return std::nullopt;  // canonical names only
  if (at == std::string_view::npos) return StorageName{*dtype, std::nullopt};
  const std::string_view kv_name = name.substr(at + kKvInfix.size());
  const std::optional<DType> kv = parse_dtype(kv_name);
  if (!kv || to_string(*kv) != kv_name || *kv == *dtype) return std::nullopt;
  return StorageName{*dtype, kv};
}

namespace {

constexpr std::uint32_t kF32SignMask = 0x8000'0000U;
constexpr std::uint32_t kF32AbsMask = 0x7FFF'FFFFU;
constexpr std::uint32_t kF32InfBits = 0x7F80'0000U;
constexpr std::uint16_t kHalfInfBits = 0x7C00U;
constexpr std::uint16_t kHalfQuietNan = 0x7FFFU;  // what CUDA's host code returns
constexpr std::uint16_t kBf16QuietNan = 0x7FFFU;
constexpr int kF32MantissaBits = 23;
constexpr int kHalfMantissaBits = 10;
constexpr int kF32ExponentBias = 127;
constexpr int kHalfExponentBias = 15;

// Shifts `value` right by `shift` bits, rounding to nearest even.
std::uint32_t shift_right_rne(std::uint32_t value, int shift) {
  if (shift >= 32) return 0;
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1U << shift) - 1U);
  const std::uint32_t half = 1U << (shift - 1);
  if (rest > half || (rest == half && (kept & 1U) != 0)) return kept + 1;
  return kept;
}

}  // namespace

std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits & kF32SignMask) >> 16);
  const std::uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32InfBits) return static_cast<std::uint16_t>(sign | kHalfQuietNan);
  if (abs == kF32InfBits) return static_cast<std::uint16_t>(sign | kHalfInfBits);

  const int exponent = static_cast<int>(abs >> kF32MantissaBits) - kF32ExponentBias;
  const std::uint32_t mantissa = abs & ((1U << kF32MantissaBits) - 1U);
  constexpr int kShift = kF32MantissaBits - kHalfMantissaBits;  // 13
  if (exponent >= -14) {
    // Normal half range: rounding may carry into the exponent and up to Inf,
    // which the integer addition below does by itself.
    const std::uint32_t biased =
        (static_cast<std::uint32_t>(exponent + kHalfExponentBias) << kF32MantissaBits) | mantissa;
    const std::uint32_t rounded = shift_right_rne(biased, kShift);
    if (rounded >= kHalfInfBits) return static_cast<std::uint16_t>(sign | kHalfInfBits);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Subnormal half (or zero): value = significand * 2^-24.
  if (abs == 0) return sign;
  const std::uint32_t significand = mantissa | (exponent == -kF32ExponentBias ? 0U : 1U << kF32MantissaBits);
  const int float_exp = exponent == -kF32ExponentBias ? -126 : exponent;
  // significand * 2^(float_exp - 23) expressed in units of 2^-24.
  const int shift = -(float_exp - kF32MantissaBits + 24);
  return static_cast<std::uint16_t>(sign | shift_right_rne(significand, shift));
}

float half_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16;
  const std::uint32_t exponent = (bits >> kHalfMantissaBits) & 0x1FU;
  const std::uint32_t mantissa = bits & 0x3FFU;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | kF32InfBits | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const std::uint32_t f32_exponent = exponent - kHalfExponentBias + kF32ExponentBias;
  return std::bit_cast<float>(sign | (f32_exponent << kF32MantissaBits) | (mantissa << 13));
}

std::uint16_t float_to_bfloat16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & kF32AbsMask) > kF32InfBits) {
    return static_cast<std::uint16_t>(((bits & kF32SignMask) >> 16) | kBf16QuietNan);
  }
  // Round to nearest even on the low 16 bits; a carry into the exponent (and
  // up to Inf) is the correct rounding.
  const std::uint32_t rounding = 0x7FFFU + ((bits >> 16) & 1U);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bfloat16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

namespace {
Fp8 fp8_format(DType dtype) { return dtype == DType::kE4M3 ? Fp8::kE4M3 : Fp8::kE5M2; }
}  // namespace

std::uint16_t float_to_bits(DType dtype, float value) {
  if (is_fp8(dtype)) return float_to_fp8_satfinite(value, fp8_format(dtype));
  return dtype == DType::kF16 ? float_to_half_bits(value) : float_to_bfloat16_bits(value);
}

std::vector<std::uint8_t> storage_bytes(DType dtype, std::span<const std::uint16_t> slots) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(slots.size() * static_cast<std::size_t>(element_bytes(dtype)));
  for (std::uint16_t s : slots) {
    bytes.push_back(static_cast<std::uint8_t>(s));
    if (!is_fp8(dtype)) bytes.push_back(static_cast<std::uint8_t>(s >> 8));
  }
  return bytes;
}

float bits_to_float(DType dtype, std::uint16_t bits) {
  if (is_fp8(dtype)) return fp8_to_float(static_cast<std::uint8_t>(bits), fp8_format(dtype));
  return dtype == DType::kF16 ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
}

}  // namespace attune
