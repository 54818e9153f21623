// templates/fp8.h against three independent oracles: the formats'
// definitions written out here (sign, exponent field, mantissa, bias), a
// nearest-value search over the 256 decoded bytes for rounding, and the CUDA
// toolkit's host emulation of `cvt.rn.satfinite` (cuda_fp8.hpp) over a sweep
// of float bit patterns; plus torch's float8 decoding of every byte as a
// table. Then the emulator's fp8 primitives, which must agree bit for bit.
#include "templates/fp8.h"

#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "templates/primitives/primitives.h"

namespace attune {
namespace {

constexpr std::array<Fp8, 2> kFormats = {Fp8::kE4M3, Fp8::kE5M2};

const char* name(Fp8 f) { return f == Fp8::kE4M3 ? "e4m3" : "e5m2"; }

// The definitions, independently of the header.
struct Definition {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinities;  // e5m2: S.11111.00 is +-inf, S.11111.xx NaN; e4m3: only S.1111.111 is NaN
  double max_finite;
};
Definition definition(Fp8 f) {
  return f == Fp8::kE4M3 ? Definition{4, 3, 7, false, 448.0} : Definition{5, 2, 15, true, 57344.0};
}

bool defined_nan(unsigned byte, Fp8 f) {
  const Definition d = definition(f);
  const unsigned exponent = (byte >> d.mantissa_bits) & ((1U << d.exponent_bits) - 1U);
  const unsigned mantissa = byte & ((1U << d.mantissa_bits) - 1U);
  const unsigned all_ones = (1U << d.exponent_bits) - 1U;
  if (d.has_infinities) return exponent == all_ones && mantissa != 0;
  return exponent == all_ones && mantissa == (1U << d.mantissa_bits) - 1U;
}

double defined_value(unsigned byte, Fp8 f) {
  const Definition d = definition(f);
  const double sign = (byte & 0x80U) != 0 ? -1.0 : 1.0;
  const unsigned exponent = (byte >> d.mantissa_bits) & ((1U << d.exponent_bits) - 1U);
  const unsigned mantissa = byte & ((1U << d.mantissa_bits) - 1U);
  if (defined_nan(byte, f)) return std::numeric_limits<double>::quiet_NaN();
  if (d.has_infinities && exponent == (1U << d.exponent_bits) - 1U) {
    return sign * std::numeric_limits<double>::infinity();
  }
  const double fraction = static_cast<double>(mantissa) / static_cast<double>(1U << d.mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - d.bias);  // subnormal
  return sign * std::ldexp(1.0 + fraction, static_cast<int>(exponent) - d.bias);
}

// Round to nearest over the finite magnitudes, ties to the even code (the
// code's last bit is the mantissa's), clamped to the largest (satfinite);
// the sign is kept, zero included.
unsigned nearest_satfinite(float x, Fp8 f) {
  const double magnitude = std::fabs(static_cast<double>(x));
  unsigned best = 0;
  for (unsigned code = 1; code < 0x80; ++code) {
    const double v = defined_value(code, f);
    if (std::isnan(v) || std::isinf(v)) continue;
    const double d_best = std::fabs(magnitude - defined_value(best, f));
    const double d = std::fabs(magnitude - v);
    if (d < d_best || (d == d_best && code % 2 == 0)) best = code;
  }
  return best | (std::signbit(x) ? 0x80U : 0U);
}

unsigned cuda_satfinite(float x, Fp8 f) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f == Fp8::kE4M3 ? __NV_E4M3 : __NV_E5M2);
}

// torch.tensor(list(range(256)), dtype=torch.uint8).view(torch.float8_e4m3fn).float(),
// likewise for torch.float8_e5m2 (torch 2.9.1), written as float bits with a
// one-off script (struct.pack('<f', x) per value). NaN payloads are torch's.
constexpr std::array<u32, 256> kTorchE4m3Bits = {
    0x00000000U, 0x3B000000U, 0x3B800000U, 0x3BC00000U, 0x3C000000U, 0x3C200000U, 0x3C400000U, 0x3C600000U, 0x3C800000U,
    0x3C900000U, 0x3CA00000U, 0x3CB00000U, 0x3CC00000U, 0x3CD00000U, 0x3CE00000U, 0x3CF00000U, 0x3D000000U, 0x3D100000U,
    0x3D200000U, 0x3D300000U, 0x3D400000U, 0x3D500000U, 0x3D600000U, 0x3D700000U, 0x3D800000U, 0x3D900000U, 0x3DA00000U,
    0x3DB00000U, 0x3DC00000U, 0x3DD00000U, 0x3DE00000U, 0x3DF00000U, 0x3E000000U, 0x3E100000U, 0x3E200000U, 0x3E300000U,
    0x3E400000U, 0x3E500000U, 0x3E600000U, 0x3E700000U, 0x3E800000U, 0x3E900000U, 0x3EA00000U, 0x3EB00000U, 0x3EC00000U,
    0x3ED00000U, 0x3EE00000U, 0x3EF00000U, 0x3F000000U, 0x3F100000U, 0x3F200000U, 0x3F300000U, 0x3F400000U, 0x3F500000U,
    0x3F600000U, 0x3F700000U, 0x3F800000U, 0x3F900000U, 0x3FA00000U, 0x3FB00000U, 0x3FC00000U, 0x3FD00000U, 0x3FE00000U,
    0x3FF00000U, 0x40000000U, 0x40100000U, 0x40200000U, 0x40300000U, 0x40400000U, 0x40500000U, 0x40600000U, 0x40700000U,
    0x40800000U, 0x40900000U, 0x40A00000U, 0x40B00000U, 0x40C00000U, 0x40D00000U, 0x40E00000U, 0x40F00000U, 0x41000000U,
    0x41100000U, 0x41200000U, 0x41300000U, 0x41400000U, 0x41500000U, 0x41600000U, 0x41700000U, 0x41800000U, 0x41900000U,
    0x41A00000U, 0x41B00000U, 0x41C00000U, 0x41D00000U, 0x41E00000U, 0x41F00000U, 0x42000000U, 0x42100000U, 0x42200000U,
    0x42300000U, 0x42400000U, 0x42500000U, 0x42600000U, 0x42700000U, 0x42800000U, 0x42900000U, 0x42A00000U, 0x42B00000U,
    0x42C00000U, 0x42D00000U, 0x42E00000U, 0x42F00000U, 0x43000000U, 0x43100000U, 0x43200000U, 0x43300000U, 0x43400000U,
    0x43500000U, 0x43600000U, 0x43700000U, 0x43800000U, 0x43900000U, 0x43A00000U, 0x43B00000U, 0x43C00000U, 0x43D00000U,
    0x43E00000U, 0x7FF00000U, 0x80000000U, 0xBB000000U, 0xBB800000U, 0xBBC00000U, 0xBC000000U, 0xBC200000U, 0xBC400000U,
    0xBC600000U, 0xBC800000U, 0xBC900000U, 0xBCA00000U, 0xBCB00000U, 0xBCC00000U, 0xBCD00000U, 0xBCE00000U, 0xBCF00000U,
    0xBD000000U, 0xBD100000U, 0xBD200000U, 0xBD300000U, 0xBD400000U, 0xBD500000U, 0xBD600000U, 0xBD700000U, 0xBD800000U,
    0xBD900000U, 0xBDA00000U, 0xBDB00000U, 0xBDC00000U, 0xBDD00000U, 0xBDE00000U, 0xBDF00000U, 0xBE000000U, 0xBE100000U,
    0xBE200000U, 0xBE300000U, 0xBE400000U, 0xBE500000U, 0xBE600000U, 0xBE700000U, 0xBE800000U, 0xBE900000U, 0xBEA00000U,
    0xBEB00000U, 0xBEC00000U, 0xBED00000U, 0xBEE00000U, 0xBEF00000U, 0xBF000000U, 0xBF100000U, 0xBF200000U, 0xBF300000U,
    0xBF400000U, 0xBF500000U, 0xBF600000U, 0xBF700000U, 0xBF800000U, 0xBF900000U, 0xBFA00000U, 0xBFB00000U, 0xBFC00000U,
    0xBFD00000U, 0xBFE00000U, 0xBFF00000U, 0xC0000000U, 0xC0100000U, 0xC0200000U, 0xC0300000U, 0xC0400000U, 0xC0500000U,
    0xC0600000U, 0xC0700000U, 0xC0800000U, 0xC0900000U, 0xC0A00000U, 0xC0B00000U, 0xC0C00000U, 0xC0D00000U, 0xC0E00000U,
    0xC0F00000U, 0xC1000000U, 0xC1100000U, 0xC1200000U, 0xC1300000U, 0xC1400000U, 0xC1500000U, 0xC1600000U, 0xC1700000U,
    0xC1800000U, 0xC1900000U, 0xC1A00000U, 0xC1B00000U, 0xC1C00000U, 0xC1D00000U, 0xC1E00000U, 0xC1F00000U, 0xC2000000U,
    0xC2100000U, 0xC2200000U, 0xC2300000U, 0xC2400000U, 0xC2500000U, 0xC2600000U, 0xC2700000U, 0xC2800000U, 0xC2900000U,
    0xC2A00000U, 0xC2B00000U, 0xC2C00000U, 0xC2D00000U, 0xC2E00000U, 0xC2F00000U, 0xC3000000U, 0xC3100000U, 0xC3200000U,
    0xC3300000U, 0xC3400000U, 0xC3500000U, 0xC3600000U, 0xC3700000U, 0xC3800000U, 0xC3900000U, 0xC3A00000U, 0xC3B00000U,
    0xC3C00000U, 0xC3D00000U, 0xC3E00000U, 0xFFF00000U,
};
constexpr std::array<u32, 256> kTorchE5m2Bits = {
    0x00000000U, 0x37800000U, 0x38000000U, 0x38400000U, 0x38800000U, 0x38A00000U, 0x38C00000U, 0x38E00000U, 0x39000000U,
    0x39200000U, 0x39400000U, 0x39600000U, 0x39800000U, 0x39A00000U, 0x39C00000U, 0x39E00000U, 0x3A000000U, 0x3A200000U,
    0x3A400000U, 0x3A600000U, 0x3A800000U, 0x3AA00000U, 0x3AC00000U, 0x3AE00000U, 0x3B000000U, 0x3B200000U, 0x3B400000U,
    0x3B600000U, 0x3B800000U, 0x3BA00000U, 0x3BC00000U, 0x3BE00000U, 0x3C000000U, 0x3C200000U, 0x3C400000U, 0x3C600000U,
    0x3C800000U, 0x3CA00000U, 0x3CC00000U, 0x3CE00000U, 0x3D000000U, 0x3D200000U, 0x3D400000U, 0x3D600000U, 0x3D800000U,
    0x3DA00000U, 0x3DC00000U, 0x3DE00000U, 0x3E000000U, 0x3E200000U, 0x3E400000U, 0x3E600000U, 0x3E800000U, 0x3EA00000U,
    0x3EC00000U, 0x3EE00000U, 0x3F000000U, 0x3F200000U, 0x3F400000U, 0x3F600000U, 0x3F800000U, 0x3FA00000U, 0x3FC00000U,
    0x3FE00000U, 0x40000000U, 0x40200000U, 0x40400000U, 0x40600000U, 0x40800000U, 0x40A00000U, 0x40C00000U, 0x40E00000U,
    0x41000000U, 0x41200000U, 0x41400000U, 0x41600000U, 0x41800000U, 0x41A00000U, 0x41C00000U, 0x41E00000U, 0x42000000U,
    0x42200000U, 0x42400000U, 0x42600000U, 0x42800000U, 0x42A00000U, 0x42C00000U, 0x42E00000U, 0x43000000U, 0x43200000U,
    0x43400000U, 0x43600000U, 0x43800000U, 0x43A00000U, 0x43C00000U, 0x43E00000U, 0x44000000U, 0x44200000U, 0x44400000U,
    0x44600000U, 0x44800000U, 0x44A00000U, 0x44C00000U, 0x44E00000U, 0x45000000U, 0x45200000U, 0x45400000U, 0x45600000U,
    0x45800000U, 0x45A00000U, 0x45C00000U, 0x45E00000U, 0x46000000U, 0x46200000U, 0x46400000U, 0x46600000U, 0x46800000U,
    0x46A00000U, 0x46C00000U, 0x46E00000U, 0x47000000U, 0x47200000U, 0x47400000U, 0x47600000U, 0x7F800000U, 0x7FE00000U,
    0x7FC00000U, 0x7FE00000U, 0x80000000U, 0xB7800000U, 0xB8000000U, 0xB8400000U, 0xB8800000U, 0xB8A00000U, 0xB8C00000U,
    0xB8E00000U, 0xB9000000U, 0xB9200000U, 0xB9400000U, 0xB9600000U, 0xB9800000U, 0xB9A00000U, 0xB9C00000U, 0xB9E00000U,
    0xBA000000U, 0xBA200000U, 0xBA400000U, 0xBA600000U, 0xBA800000U, 0xBAA00000U, 0xBAC00000U, 0xBAE00000U, 0xBB000000U,
    0xBB200000U, 0xBB400000U, 0xBB600000U, 0xBB800000U, 0xBBA00000U, 0xBBC00000U, 0xBBE00000U, 0xBC000000U, 0xBC200000U,
    0xBC400000U, 0xBC600000U, 0xBC800000U, 0xBCA00000U, 0xBCC00000U, 0xBCE00000U, 0xBD000000U, 0xBD200000U, 0xBD400000U,
    0xBD600000U, 0xBD800000U, 0xBDA00000U, 0xBDC00000U, 0xBDE00000U, 0xBE000000U, 0xBE200000U, 0xBE400000U, 0xBE600000U,
    0xBE800000U, 0xBEA00000U, 0xBEC00000U, 0xBEE00000U, 0xBF000000U, 0xBF200000U, 0xBF400000U, 0xBF600000U, 0xBF800000U,
    0xBFA00000U, 0xBFC00000U, 0xBFE00000U, 0xC0000000U, 0xC0200000U, 0xC0400000U, 0xC0600000U, 0xC0800000U, 0xC0A00000U,
    0xC0C00000U, 0xC0E00000U, 0xC1000000U, 0xC1200000U, 0xC1400000U, 0xC1600000U, 0xC1800000U, 0xC1A00000U, 0xC1C00000U,
    0xC1E00000U, 0xC2000000U, 0xC2200000U, 0xC2400000U, 0xC2600000U, 0xC2800000U, 0xC2A00000U, 0xC2C00000U, 0xC2E00000U,
    0xC3000000U, 0xC3200000U, 0xC3400000U, 0xC3600000U, 0xC3800000U, 0xC3A00000U, 0xC3C00000U, 0xC3E00000U, 0xC4000000U,
    0xC4200000U, 0xC4400000U, 0xC4600000U, 0xC4800000U, 0xC4A00000U, 0xC4C00000U, 0xC4E00000U, 0xC5000000U, 0xC5200000U,
    0xC5400000U, 0xC5600000U, 0xC5800000U, 0xC5A00000U, 0xC5C00000U, 0xC5E00000U, 0xC6000000U, 0xC6200000U, 0xC6400000U,
    0xC6600000U, 0xC6800000U, 0xC6A00000U, 0xC6C00000U, 0xC6E00000U, 0xC7000000U, 0xC7200000U, 0xC7400000U, 0xC7600000U,
    0xFF800000U, 0xFFE00000U, 0xFFC00000U, 0xFFE00000U,
};

TEST(Fp8Test, EveryByteDecodesToItsDefinedValue) {
  for (const Fp8 f : kFormats) {
    int nans = 0;
    for (unsigned byte = 0; byte < 256; ++byte) {
      const float got = fp8_to_float(static_cast<u8>(byte), f);
      const double want = defined_value(byte, f);
      if (std::isnan(want)) {
        ++nans;
        EXPECT_TRUE(std::isnan(got)) << name(f) << " byte " << byte;
        continue;
      }
      EXPECT_EQ(static_cast<double>(got), want) << name(f) << " byte " << byte;
      EXPECT_EQ(std::signbit(got), (byte & 0x80U) != 0) << name(f) << " byte " << byte << ": the sign, zero's too";
    }
    EXPECT_EQ(nans, f == Fp8::kE4M3 ? 2 : 6) << name(f);
  }
  EXPECT_EQ(fp8_to_float(0x7E, Fp8::kE4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8::kE4M3), 0x1p-9f);
  EXPECT_EQ(fp8_to_float(0x7B, Fp8::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8::kE5M2), 0x1p-16f);
  EXPECT_EQ(fp8_to_float(0xFC, Fp8::kE5M2), -std::numeric_limits<float>::infinity());
}

TEST(Fp8Test, EveryByteDecodesAsTorchDoes) {
  for (const Fp8 f : kFormats) {
    const auto& table = f == Fp8::kE4M3 ? kTorchE4m3Bits : kTorchE5m2Bits;
    for (unsigned byte = 0; byte < 256; ++byte) {
      const float got = fp8_to_float(static_cast<u8>(byte), f);
      const float want = std::bit_cast<float>(table[byte]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << name(f) << " byte " << byte;
      } else {
        EXPECT_EQ(std::bit_cast<u32>(got), table[byte]) << name(f) << " byte " << byte;
      }
    }
  }
}

TEST(Fp8Test, EveryNonNanByteRoundTrips) {
  for (const Fp8 f : kFormats) {
    for (unsigned byte = 0; byte < 256; ++byte) {
      if (defined_nan(byte, f)) continue;
      const float value = fp8_to_float(static_cast<u8>(byte), f);
      const unsigned want = std::isinf(value) ? (byte & 0x80U) | (f == Fp8::kE4M3 ? 0x7EU : 0x7BU) : byte;
      EXPECT_EQ(float_to_fp8_satfinite(value, f), want) << name(f) << " byte " << byte;
    }
  }
}

// Every midpoint between adjacent magnitudes (both signs), and the floats
// just below and above it: ties go to the even code, the rest to the nearer.
// Covers the carry into the next binade, the largest subnormal to the
// smallest normal, and half the smallest subnormal (a tie with zero).
TEST(Fp8Test, RoundsToNearestEvenAtEveryMidpoint) {
  for (const Fp8 f : kFormats) {
    const unsigned max_code = f == Fp8::kE4M3 ? 0x7EU : 0x7BU;
    int ties = 0;
    for (unsigned code = 0; code < max_code; ++code) {
      const double lower = defined_value(code, f);
      const double upper = defined_value(code + 1, f);
      const float midpoint = static_cast<float>((lower + upper) / 2);
      ASSERT_EQ(static_cast<double>(midpoint), (lower + upper) / 2) << "exact in float";
      for (const float sign : {1.0f, -1.0f}) {
        const unsigned sign_bit = sign < 0 ? 0x80U : 0U;
        const float m = sign * midpoint;
        const unsigned even = (code % 2 == 0 ? code : code + 1) | sign_bit;
        EXPECT_EQ(float_to_fp8_satfinite(m, f), even) << name(f) << " tie " << m;
        const float toward_zero = std::nextafter(m, 0.0f);
        const float away = std::nextafter(m, sign * std::numeric_limits<float>::infinity());
        EXPECT_EQ(float_to_fp8_satfinite(toward_zero, f), code | sign_bit) << name(f) << " below " << m;
        EXPECT_EQ(float_to_fp8_satfinite(away, f), (code + 1) | sign_bit) << name(f) << " above " << m;
        for (const float x : {m, toward_zero, away}) {
          EXPECT_EQ(float_to_fp8_satfinite(x, f), nearest_satfinite(x, f)) << name(f) << " " << x;
        }
        ++ties;
      }
    }
    EXPECT_EQ(ties, 2 * static_cast<int>(max_code)) << name(f);
  }
  // Named cases, by hand.
  EXPECT_EQ(float_to_fp8_satfinite(0x1.1p0f, Fp8::kE4M3), 0x38U);  // 1.0625: tie of 1 (0x38) and 1.125 (0x39)
  EXPECT_EQ(float_to_fp8_satfinite(0x1.3p0f, Fp8::kE4M3), 0x3AU);  // 1.1875: tie of 1.125 and 1.25 (even)
  EXPECT_EQ(float_to_fp8_satfinite(15.5f, Fp8::kE4M3), 0x58U);     // tie of 15 (0x57) and 16: up a binade
  EXPECT_EQ(float_to_fp8_satfinite(0x1.ep-7f, Fp8::kE4M3),
            0x08U);  // tie of the largest subnormal and the smallest normal
  EXPECT_EQ(float_to_fp8_satfinite(0x1p-10f, Fp8::kE4M3), 0x00U);  // half the smallest subnormal: to zero
  EXPECT_EQ(float_to_fp8_satfinite(0x1.000002p-10f, Fp8::kE4M3), 0x01U);
  EXPECT_EQ(float_to_fp8_satfinite(0x1p-17f, Fp8::kE5M2), 0x00U);
  EXPECT_EQ(float_to_fp8_satfinite(0x1.8p-16f, Fp8::kE5M2), 0x02U);  // 1.5 subnormal quanta: to 2 (even)
}

TEST(Fp8Test, TinyValuesGoToZeroKeepingTheirSign) {
  for (const Fp8 f : kFormats) {
    const float half_smallest = f == Fp8::kE4M3 ? 0x1p-10f : 0x1p-17f;
    for (const float x : {0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1e-30f,
                          half_smallest / 3, half_smallest}) {
      EXPECT_EQ(float_to_fp8_satfinite(x, f), 0x00U) << name(f) << " " << x;
      EXPECT_EQ(float_to_fp8_satfinite(-x, f), 0x80U) << name(f) << " " << -x;
    }
  }
}

// satfinite: past the largest finite magnitude (even where RNE would round
// to the next binade, which e4m3 does not have and e5m2 spends on inf) and
// +-inf give +-MAX_NORM; NaN gives 0x7F whatever its sign and payload.
TEST(Fp8Test, SaturatesToTheLargestFiniteAndNanIsCanonical) {
  const float inf = std::numeric_limits<float>::infinity();
  // e4m3: 464 is the tie of 448 (1.110, even) and 480 (1.111, the NaN code):
  // RNE gives 448; anything above rounds past it and saturates to 448.
  for (const float x : {448.0f, 449.0f, 464.0f, std::nextafter(464.0f, inf), 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(float_to_fp8_satfinite(x, Fp8::kE4M3), 0x7EU) << x;
    EXPECT_EQ(float_to_fp8_satfinite(-x, Fp8::kE4M3), 0xFEU) << -x;
  }
  // e5m2: 61440 ties 57344 (1.11, odd) and 65536 (even, an overflow to inf
  // under plain RNE): saturated to 57344.
  for (const float x : {57344.0f, 61439.0f, 61440.0f, 65536.0f, 1e9f, 3e38f, inf}) {
    EXPECT_EQ(float_to_fp8_satfinite(x, Fp8::kE5M2), 0x7BU) << x;
    EXPECT_EQ(float_to_fp8_satfinite(-x, Fp8::kE5M2), 0xFBU) << -x;
  }
  EXPECT_EQ(float_to_fp8_satfinite(std::nextafter(464.0f, 0.0f), Fp8::kE4M3), 0x7EU);
  EXPECT_EQ(float_to_fp8_satfinite(std::nextafter(61440.0f, 0.0f), Fp8::kE5M2), 0x7BU);
  EXPECT_EQ(float_to_fp8_satfinite(53248.0f, Fp8::kE5M2), 0x7AU);  // tie of 49152 and 57344: to 1.10 (even)
  for (const Fp8 f : kFormats) {
    for (const u32 nan : {0x7FC00000U, 0xFFC00000U, 0x7F800001U, 0xFFFFFFFFU, 0x7FBADBADU}) {
      EXPECT_EQ(float_to_fp8_satfinite(std::bit_cast<float>(nan), f), 0x7FU) << name(f) << " " << std::hex << nan;
    }
  }
}

// The CUDA toolkit's host emulation of the instruction, bit for bit, over
// about 17 million float patterns (a prime stride through all 2^32) in each
// format: every sign, binade, NaN payload and the subnormals among them.
TEST(Fp8Test, MatchesTheCudaToolkitsHostEmulation) {
  for (const Fp8 f : kFormats) {
    int mismatches = 0;
    for (unsigned long long pattern = 0; pattern <= 0xFFFFFFFFULL; pattern += 251) {
      const float x = std::bit_cast<float>(static_cast<u32>(pattern));
      const unsigned want = cuda_satfinite(x, f);
      const unsigned got = float_to_fp8_satfinite(x, f);
      if (got != want && ++mismatches <= 10) {
        ADD_FAILURE() << name(f) << " " << std::hex << pattern << ": " << got << ", cuda_fp8.hpp " << want;
      }
    }
    EXPECT_EQ(mismatches, 0) << name(f);
  }
}

TEST(Fp8Test, PairsHoldTheFirstValueInTheLowByte) {
  for (const Fp8 f : kFormats) {
    const u16 pair = pack_fp8x2(1.0f, -2.0f, f);
    EXPECT_EQ(pair & 0xFFU, float_to_fp8_satfinite(1.0f, f)) << name(f);
    EXPECT_EQ(pair >> 8, float_to_fp8_satfinite(-2.0f, f)) << name(f);
    EXPECT_EQ(unpack_fp8x2_lo(pair, f), 1.0f) << name(f);
    EXPECT_EQ(unpack_fp8x2_hi(pair, f), -2.0f) << name(f);
    // As the toolkit packs a float2 (x in the low byte: cvt's second operand).
    EXPECT_EQ(pair,
              __nv_cvt_float2_to_fp8x2(float2{1.0f, -2.0f}, __NV_SATFINITE, f == Fp8::kE4M3 ? __NV_E4M3 : __NV_E5M2))
        << name(f);
  }
  EXPECT_EQ(pack_fp8x2(1.0f, -2.0f, Fp8::kE4M3), 0xC038U);
  EXPECT_EQ(pack_fp8x2(1.0f, -2.0f, Fp8::kE5M2), 0xC03CU);
}

// Widening to fp16 (cvt.rn.f16x2.{e4m3x2,e5m2x2}): exact, NaN as 0x7FFF, as
// the toolkit's host emulation does it.
TEST(Fp8Test, WidensToHalfAsTheCudaToolkitDoes) {
  for (const Fp8 f : kFormats) {
    for (unsigned byte = 0; byte < 256; ++byte) {
      const __half_raw want =
          __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte), f == Fp8::kE4M3 ? __NV_E4M3 : __NV_E5M2);
      EXPECT_EQ(fp8_to_half_bits(static_cast<u8>(byte), f), want.x) << name(f) << " byte " << byte;
    }
    EXPECT_EQ(fp8x2_to_half2_bits(pack_fp8x2(0.5f, -3.0f, f), f), 0xC2003800U) << name(f);
  }
}

// The emulator's primitives (templates/primitives/emulated.h) are the same
// conversions under the device names: checked against the toolkit over every
// pair of bytes (widening) and against the header (packing).
template <Fp8 F>
void check_emulated_primitives() {
  const __nv_fp8_interpretation_t kind = F == Fp8::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  for (u32 pair = 0; pair < 0x10000U; ++pair) {
    const __half2_raw want = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kind);
    const u32 got = dev::fp8x2_to_half2<F>(static_cast<u16>(pair));
    ASSERT_EQ(got, static_cast<u32>(want.x) | (static_cast<u32>(want.y) << 16)) << name(F) << " " << pair;
    const float lo = dev::unpack_fp8x2_lo<F>(static_cast<u16>(pair));
    const float hi = dev::unpack_fp8x2_hi<F>(static_cast<u16>(pair));
    const float want_lo = fp8_to_float(static_cast<u8>(pair), F);
    const float want_hi = fp8_to_float(static_cast<u8>(pair >> 8), F);
    ASSERT_TRUE(std::isnan(want_lo) ? std::isnan(lo) : lo == want_lo) << name(F) << " " << pair;
    ASSERT_TRUE(std::isnan(want_hi) ? std::isnan(hi) : hi == want_hi) << name(F) << " " << pair;
  }
  for (unsigned long long pattern = 0; pattern <= 0xFFFFFFFFULL; pattern += 65521) {
    const float x = std::bit_cast<float>(static_cast<u32>(pattern));
    const float y = -0.37f * x;
    ASSERT_EQ(dev::pack_fp8x2<F>(x, y), pack_fp8x2(x, y, F)) << name(F) << " " << x << ", " << y;
  }
  EXPECT_EQ(dev::pack_fp8x2<F>(1.0f, -2.0f) & 0xFFU, float_to_fp8_satfinite(1.0f, F)) << "lo in the low byte";
}

TEST(Fp8Test, TheEmulatorsPrimitivesAgree) {
  check_emulated_primitives<Fp8::kE4M3>();
  check_emulated_primitives<Fp8::kE5M2>();
}

}  // namespace
}  // namespace attune
