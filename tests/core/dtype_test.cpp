// Checks attune's host fp16/bf16 conversions bit for bit against the CUDA
// toolkit's own host implementations, over every 16-bit pattern.
#include "core/dtype.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attune {
namespace {

std::uint16_t cuda_float_to_half(float value) {
  const __half_raw raw = __float2half_rn(value);
  return raw.x;
}

std::uint16_t cuda_float_to_bf16(float value) {
  const __nv_bfloat16_raw raw = __float2bfloat16_rn(value);
  return raw.x;
}

float cuda_half_to_float(std::uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

float cuda_bf16_to_float(std::uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}

bool is_nan_half(std::uint16_t bits) { return (bits & 0x7C00U) == 0x7C00U && (bits & 0x3FFU) != 0; }
bool is_nan_bf16(std::uint16_t bits) { return (bits & 0x7F80U) == 0x7F80U && (bits & 0x7FU) != 0; }

// Expects `ours` to equal `theirs` bit for bit, except that any NaN matches
// any NaN (payloads are not part of the contract).
void expect_same_float(float ours, float theirs, std::uint32_t pattern) {
  if (std::isnan(theirs)) {
    EXPECT_TRUE(std::isnan(ours)) << "pattern 0x" << std::hex << pattern;
  } else {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(ours), std::bit_cast<std::uint32_t>(theirs))
        << "pattern 0x" << std::hex << pattern;
  }
}

// Floats that probe the rounding of a conversion to a 16-bit format around
// the value `center`: the value, its float neighbours and the midpoints to
// the next representable 16-bit value.
std::vector<float> probes_around(float center, float next) {
  std::vector<float> out = {center, std::nextafter(center, -std::numeric_limits<float>::infinity()),
                            std::nextafter(center, std::numeric_limits<float>::infinity())};
  if (std::isfinite(center) && std::isfinite(next)) {
    const auto mid = static_cast<float>((static_cast<double>(center) + static_cast<double>(next)) / 2.0);
    out.push_back(mid);
    out.push_back(std::nextafter(mid, -std::numeric_limits<float>::infinity()));
    out.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  return out;
}

TEST(DTypeTest, HalfToFloatMatchesCudaOnAllPatterns) {
  for (std::uint32_t p = 0; p <= 0xFFFFU; ++p) {
    const auto bits = static_cast<std::uint16_t>(p);
    expect_same_float(half_bits_to_float(bits), cuda_half_to_float(bits), p);
  }
}

TEST(DTypeTest, Bf16ToFloatMatchesCudaOnAllPatterns) {
  for (std::uint32_t p = 0; p <= 0xFFFFU; ++p) {
    const auto bits = static_cast<std::uint16_t>(p);
    expect_same_float(bfloat16_bits_to_float(bits), cuda_bf16_to_float(bits), p);
  }
}

TEST(DTypeTest, FloatToHalfMatchesCudaAroundAllPatterns) {
  int checked = 0;
  for (std::uint32_t p = 0; p <= 0xFFFFU; ++p) {
    const auto bits = static_cast<std::uint16_t>(p);
    if (is_nan_half(bits)) continue;
    const float center = cuda_half_to_float(bits);
    const float next = cuda_half_to_float(static_cast<std::uint16_t>(bits + 1U));
    for (float probe : probes_around(center, next)) {
      const std::uint16_t theirs = cuda_float_to_half(probe);
      const std::uint16_t ours = float_to_half_bits(probe);
      ++checked;
      if (is_nan_half(theirs)) {
        EXPECT_TRUE(is_nan_half(ours)) << "probe " << probe;
      } else {
        ASSERT_EQ(ours, theirs) << "probe " << probe << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(probe)
                                << ")";
      }
    }
  }
  EXPECT_GT(checked, 6 * 60000);
}

TEST(DTypeTest, FloatToBf16MatchesCudaAroundAllPatterns) {
  // Every bf16 pattern as the high half, with low halves that hit exact
  // values, just-below/at/just-above ties and the top of the interval.
  const std::uint32_t lows[] = {0x0000U, 0x0001U, 0x7FFFU, 0x8000U, 0x8001U, 0xFFFFU, 0x1234U};
  for (std::uint32_t p = 0; p <= 0xFFFFU; ++p) {
    for (std::uint32_t low : lows) {
      const float probe = std::bit_cast<float>((p << 16) | low);
      const std::uint16_t theirs = cuda_float_to_bf16(probe);
      const std::uint16_t ours = float_to_bfloat16_bits(probe);
      if (is_nan_bf16(theirs)) {
        EXPECT_TRUE(is_nan_bf16(ours)) << "pattern 0x" << std::hex << ((p << 16) | low);
      } else {
        ASSERT_EQ(ours, theirs) << "pattern 0x" << std::hex << ((p << 16) | low);
      }
    }
  }
}

TEST(DTypeTest, InfAndNanArePreserved) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    EXPECT_EQ(round_to(dtype, inf), inf);
    EXPECT_EQ(round_to(dtype, -inf), -inf);
    EXPECT_TRUE(std::isnan(round_to(dtype, nan)));
    EXPECT_TRUE(std::isnan(round_to(dtype, -nan)));
  }
  // Overflow rounds to Inf, as round-to-nearest-even requires.
  EXPECT_EQ(round_to(DType::kF16, 65520.0F), inf);
  EXPECT_EQ(round_to(DType::kF16, 65519.0F), 65504.0F);
}

TEST(DTypeTest, TiesRoundToEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 in fp16: even is 1.
  EXPECT_EQ(round_to(DType::kF16, 1.0F + 0x1p-11F), 1.0F);
  EXPECT_EQ(round_to(DType::kF16, 1.0F + 3 * 0x1p-11F), 1.0F + 2 * 0x1p-10F);
  // bf16 has 7 mantissa bits: 1 + 2^-8 ties to 1.
  EXPECT_EQ(round_to(DType::kBF16, 1.0F + 0x1p-8F), 1.0F);
  EXPECT_EQ(round_to(DType::kBF16, 1.0F + 3 * 0x1p-8F), 1.0F + 2 * 0x1p-7F);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kE4M3, DType::kE5M2}) {
    EXPECT_EQ(parse_dtype(to_string(dtype)), dtype);
  }
  EXPECT_FALSE(parse_dtype("fp8").has_value());
  // torch's names
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kE4M3);
  EXPECT_EQ(parse_dtype("float8_e5m2"), DType::kE5M2);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
}

TEST(DTypeTest, Fp8StoresOneByteAndRoundsAsCvtSatfinite) {
  EXPECT_EQ(element_bytes(DType::kE4M3), 1);
  EXPECT_EQ(element_bytes(DType::kBF16), 2);
  EXPECT_TRUE(is_fp8(DType::kE5M2));
  EXPECT_FALSE(is_fp8(DType::kF16));
  EXPECT_EQ(float_to_bits(DType::kE4M3, 300.0F), 0x79);     // 288 (0x79): nearer than 320 (0x7A)
  EXPECT_EQ(float_to_bits(DType::kE4M3, 1e6F), 0x7E);       // saturates to 448
  EXPECT_EQ(bits_to_float(DType::kE5M2, 0x3C), 1.0F);       // e5m2 is fp16's upper byte
  EXPECT_EQ(round_to(DType::kE4M3, 1.0F + 0x1p-4F), 1.0F);  // 3 mantissa bits: a tie to even
  // Slots to the bytes kernels read: one per fp8 element, two (little-endian) per 16-bit one.
  const std::vector<std::uint16_t> slots = {0x0138, 0x00C0, 0x1234};
  EXPECT_EQ(storage_bytes(DType::kE4M3, slots), (std::vector<std::uint8_t>{0x38, 0xC0, 0x34}));
  EXPECT_EQ(storage_bytes(DType::kBF16, slots), (std::vector<std::uint8_t>{0x38, 0x01, 0xC0, 0x00, 0x34, 0x12}));
}

TEST(DTypeTest, StorageNamesKeyAnFp8CacheApart) {
  EXPECT_EQ(storage_name(DType::kBF16, std::nullopt), "bf16");
  EXPECT_EQ(storage_name(DType::kBF16, DType::kBF16), "bf16");
  EXPECT_EQ(storage_name(DType::kE4M3, DType::kE4M3), "e4m3");
  EXPECT_EQ(storage_name(DType::kF16, DType::kE5M2), "fp16-kv-e5m2");
  for (const char* name : {"bf16", "e4m3", "fp16-kv-e5m2", "bf16-kv-e4m3"}) {
    const std::optional<StorageName> parsed = parse_storage_name(name);
    ASSERT_TRUE(parsed.has_value()) << name;
    EXPECT_EQ(storage_name(parsed->dtype, parsed->kv_dtype), name);
  }
  // Canonical names only, and a cache in its queries' own dtype is no second dtype.
  for (const char* name : {"bfloat16", "bf16-kv-bf16", "bf16-kv-", "bf16-kv-float8_e4m3fn", "kv-e4m3", "bf16-kv-fp8"}) {
    EXPECT_FALSE(parse_storage_name(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace attune
