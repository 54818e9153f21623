// The two 8-bit float formats of Hopper's tensor cores, as bits: decoding,
// and encoding as PTX's `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` does it. One
// header for the host (core/, the fp64 reference), the emulator's primitives
// (templates/primitives/emulated.h) and device code, so all of them round the
// same values to the same bytes.
//
//   e4m3 (OCP "E4M3FN"): bias 7, 3 mantissa bits, subnormals, no infinities,
//        NaN = S.1111.111; largest finite 448 (S.1111.110).
//   e5m2: bias 15, 2 mantissa bits, subnormals, IEEE-like infinities
//        (S.11111.00) and NaNs (S.11111.{01,10,11}); largest finite 57344.
//
// PTX ISA, cvt, on .satfinite for .e4m3x2/.e5m2x2 destinations: "if the
// input value is NaN, then the result is NaN in the specified destination
// format. If the absolute value of input (ignoring sign) is greater than
// MAX_NORM of the specified destination format, then the result is
// sign-preserved MAX_NORM of the destination format." So +-inf and every
// value that rounds past the largest finite magnitude give +-MAX_NORM (e4m3
// 0x7E/0xFE, e5m2 0x7B/0xFB); no conversion ever yields an infinity. The NaN
// written is 0x7F in both formats, sign dropped: the canonical NaN of
// CUDA's own host emulation of these instructions (cuda_fp8.hpp,
// __nv_cvt_double_to_fp8), which the hardware's result is meant to match.
// Rounding is to nearest, ties to even, subnormal results included.
//
// The pair form follows cvt ...x2 (PTX: "the value converted from input a is
// stored in the upper 8 bits of d and the value converted from input b is
// stored in the lower 8 bits"): pack_fp8x2(lo, hi) holds lo in bits 0..7 and
// hi in bits 8..15, i.e. `cvt.rn.satfinite.e4m3x2.f32 d, hi, lo`.
//
//   const u8 b = float_to_fp8_satfinite(300.0f, Fp8::kE4M3);  // 0x79: 288 (300 is nearer 288 than 320)
//   fp8_to_float(b, Fp8::kE4M3);                               // 288.0f
#pragma once

#include "templates/primitives/config.h"

namespace attune {

enum class Fp8 : u8 { kE4M3, kE5M2 };

namespace fp8 {

// The field widths and limits of a format, as bits.
struct Format {
  i32 mantissa_bits;
  i32 bias;
  u8 max_finite;  // the code of the largest finite magnitude
};

ATTUNE_HOST_DEVICE inline Format format_of(Fp8 f) { return f == Fp8::kE4M3 ? Format{3, 7, 0x7E} : Format{2, 15, 0x7B}; }

inline constexpr u8 kCanonicalNan = 0x7F;
inline constexpr u16 kHalfCanonicalNan = 0x7FFF;

ATTUNE_HOST_DEVICE inline u32 float_bits(float x) { return __builtin_bit_cast(u32, x); }
ATTUNE_HOST_DEVICE inline float bits_float(u32 x) { return __builtin_bit_cast(float, x); }

ATTUNE_HOST_DEVICE inline bool is_nan(u8 bits, Fp8 f) {
  const u32 magnitude = bits & 0x7FU;
  return f == Fp8::kE4M3 ? magnitude == 0x7F : magnitude > 0x7C;
}

}  // namespace fp8

// The value of an fp8 byte, exactly (every one is a float). NaN bytes give
// the float NaN 0x7FFFFFFF; e5m2's S.11111.00 gives +-inf.
ATTUNE_HOST_DEVICE inline float fp8_to_float(u8 bits, Fp8 f) {
  const fp8::Format fmt = fp8::format_of(f);
  const u32 sign = static_cast<u32>(bits >> 7) << 31;
  const i32 exponent = (bits & 0x7F) >> fmt.mantissa_bits;
  const u32 mantissa = bits & ((1U << fmt.mantissa_bits) - 1U);
  if (fp8::is_nan(bits, f)) return fp8::bits_float(0x7FFFFFFFU);
  if (f == Fp8::kE5M2 && exponent == 31) return fp8::bits_float(sign | 0x7F800000U);
  if (exponent == 0) {
    // mantissa * 2^(1 - bias - mantissa_bits): a small integer times a power
    // of two, exact in float.
    const u32 scale = static_cast<u32>(127 + 1 - fmt.bias - fmt.mantissa_bits) << 23;
    return fp8::bits_float(sign | fp8::float_bits(static_cast<float>(mantissa) * fp8::bits_float(scale)));
  }
  return fp8::bits_float(sign | (static_cast<u32>(exponent - fmt.bias + 127) << 23) |
                         (mantissa << (23 - fmt.mantissa_bits)));
}

// `x` rounded to the nearest fp8 value, ties to even, as
// `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` rounds it (see the top of the file):
// magnitudes past the largest finite one and +-inf give +-MAX_NORM, NaN the
// canonical NaN 0x7F, results below half the smallest subnormal +-0.
ATTUNE_HOST_DEVICE inline u8 float_to_fp8_satfinite(float x, Fp8 f) {
  const fp8::Format fmt = fp8::format_of(f);
  const u32 bits = fp8::float_bits(x);
  const u8 sign = static_cast<u8>((bits >> 31) << 7);
  const u32 magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) return fp8::kCanonicalNan;
  if (magnitude == 0x7F800000U) return static_cast<u8>(sign | fmt.max_finite);
  // Float subnormals are far below half of either format's smallest
  // subnormal (2^-10, 2^-17).
  if (magnitude < 0x00800000U) return sign;
  const i32 exponent = static_cast<i32>(magnitude >> 23) - 127;
  const u32 significand = (magnitude & 0x7FFFFFU) | 0x800000U;  // x = significand * 2^(exponent - 23)
  // The result is n quanta of 2^(max(exponent, min normal exponent) -
  // mantissa_bits): significand shifted right by `shift`, rounded to even.
  const i32 min_exponent = 1 - fmt.bias;
  const i32 binade = exponent > min_exponent ? exponent : min_exponent;
  const i32 shift = 23 - fmt.mantissa_bits + (binade - exponent);
  if (shift > 24) return sign;  // below half the smallest subnormal
  u32 n = significand >> shift;
  const u32 rest = significand & ((1U << shift) - 1U);
  const u32 half = 1U << (shift - 1);
  if (rest > half || (rest == half && (n & 1U) != 0U)) ++n;
  // n carries the implicit bit for normals, so a carry out of the mantissa
  // (rounding up into the next binade, or from the largest subnormal into
  // the smallest normal) lands in the exponent field by itself.
  const i32 code = ((binade + fmt.bias - 1) << fmt.mantissa_bits) + static_cast<i32>(n);
  return static_cast<u8>(sign | (code > fmt.max_finite ? fmt.max_finite : code));
}

// Two values converted and packed as cvt ...x2 packs them: lo in bits 0..7.
ATTUNE_HOST_DEVICE inline u16 pack_fp8x2(float lo, float hi, Fp8 f) {
  return static_cast<u16>(float_to_fp8_satfinite(lo, f) | (float_to_fp8_satfinite(hi, f) << 8));
}
ATTUNE_HOST_DEVICE inline float unpack_fp8x2_lo(u16 pair, Fp8 f) { return fp8_to_float(static_cast<u8>(pair), f); }
ATTUNE_HOST_DEVICE inline float unpack_fp8x2_hi(u16 pair, Fp8 f) { return fp8_to_float(static_cast<u8>(pair >> 8), f); }

// The fp16 bits of an fp8 byte, as `cvt.rn.f16x2.{e4m3x2,e5m2x2}` widens
// each byte: exact (every e4m3 and e5m2 value is an fp16 value), NaN as
// fp16's canonical NaN 0x7FFF (sign dropped, as cuda_fp8.hpp's host
// emulation of the instruction does).
ATTUNE_HOST_DEVICE inline u16 fp8_to_half_bits(u8 bits, Fp8 f) {
  if (fp8::is_nan(bits, f)) return fp8::kHalfCanonicalNan;
  if (f == Fp8::kE5M2) return static_cast<u16>(bits << 8);  // e5m2 is fp16's upper byte
  const u16 sign = static_cast<u16>((bits >> 7) << 15);
  if ((bits & 0x7F) == 0) return sign;
  // Every nonzero e4m3 magnitude (2^-9 .. 448) is a normal fp16.
  const u32 value = fp8::float_bits(fp8_to_float(bits, f)) & 0x7FFFFFFFU;
  return static_cast<u16>(sign | (((value >> 23) - 127 + 15) << 10) | ((value >> 13) & 0x3FFU));
}
ATTUNE_HOST_DEVICE inline u32 fp8x2_to_half2_bits(u16 pair, Fp8 f) {
  return static_cast<u32>(fp8_to_half_bits(static_cast<u8>(pair), f)) |
         (static_cast<u32>(fp8_to_half_bits(static_cast<u8>(pair >> 8), f)) << 16);
}

}  // namespace attune
