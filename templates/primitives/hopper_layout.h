// Hopper's operand layouts, defined once for the CUDA primitives, the
// emulator and the tests (PTX ISA 9.7.15 "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate", and 5.5 "Tensors" for the swizzle TMA writes):
//   - the swizzle modes: which 16-byte chunk of shared memory holds a byte;
//   - wgmma's 64-bit matrix descriptor (9.7.15.5.1.1) and the canonical
//     layouts it describes, K-major and MN-major (9.7.15.5.1.2);
//   - the register fragments of wgmma's accumulator and of its A operand
//     (9.7.15.5.1.1, "Register Fragments").
// Everything here is constexpr arithmetic on shared-window byte addresses.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

// A tensor map (CUtensorMap): 128 bytes, passed to a kernel by value as a
// __grid_constant__ parameter and read by TMA through its address. On a GPU
// the driver writes it (cuTensorMapEncodeTiled); on the emulator it holds
// the emulator's own description of the same box.
struct alignas(64) TensorMap {
  u64 words[16];
};

}  // namespace attune

namespace attune::sm90 {

// The descriptor's encoding (bits 62-63). TMA's CU_TENSOR_MAP_SWIZZLE_* names
// the same patterns.
enum class Swizzle : u32 { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// Bytes of one swizzled row (the span of the pattern): 32, 64 or 128; 16 for
// none (one 16-byte chunk: the core matrix row).
ATTUNE_HOST_DEVICE constexpr i32 swizzle_span(Swizzle s) {
  return s == Swizzle::k128B ? 128 : s == Swizzle::k64B ? 64 : s == Swizzle::k32B ? 32 : 16;
}

// Bytes after which the pattern repeats: 8 rows of its span. A swizzled
// buffer starts at a multiple of this (CUDA Programming Guide, TMA swizzle:
// 1024, 512 and 256 bytes); 128 for none (TMA's shared-memory alignment).
ATTUNE_HOST_DEVICE constexpr i32 swizzle_atom_bytes(Swizzle s) {
  return s == Swizzle::kNone ? 128 : 8 * swizzle_span(s);
}

// The shared-memory byte that holds logical byte `address`: the 16-byte
// chunk index within a row of the span (address bits 4 and up) is XORed with
// the row index within the atom (bits 7 and up), as many bits as the span
// has chunks. The hardware applies it to the shared-window address, so a
// buffer aligned to its atom sees the pattern from its first row.
ATTUNE_HOST_DEVICE constexpr u32 swizzle_address(Swizzle s, u32 address) {
  const u32 chunk_bits = s == Swizzle::k128B ? 3U : s == Swizzle::k64B ? 2U : s == Swizzle::k32B ? 1U : 0U;
  const u32 mask = ((1U << chunk_bits) - 1U) << 4;
  return address ^ ((address >> 3) & mask);
}

// The fields of a wgmma matrix descriptor, in bytes (the encoding keeps
// bits 4-17 of each; the low 4 bits must be zero).
struct MatrixDescriptor {
  u32 start = 0;          // shared-window address of the operand's first element
  u32 leading_bytes = 0;  // LBO: see operand_address
  u32 stride_bytes = 0;   // SBO: see operand_address
  u32 base_offset = 0;    // 3 bits; 0 for buffers aligned to their swizzle atom
  Swizzle swizzle = Swizzle::kNone;
};

// Bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset,
// 62-63 swizzle.
ATTUNE_HOST_DEVICE constexpr u64 encode_descriptor(const MatrixDescriptor& d) {
  return static_cast<u64>((d.start & 0x3FFFFU) >> 4) | (static_cast<u64>((d.leading_bytes & 0x3FFFFU) >> 4) << 16) |
         (static_cast<u64>((d.stride_bytes & 0x3FFFFU) >> 4) << 32) | (static_cast<u64>(d.base_offset & 7U) << 49) |
         (static_cast<u64>(d.swizzle) << 62);
}

ATTUNE_HOST_DEVICE constexpr MatrixDescriptor decode_descriptor(u64 bits) {
  MatrixDescriptor d;
  d.start = static_cast<u32>(bits & 0x3FFFU) << 4;
  d.leading_bytes = static_cast<u32>((bits >> 16) & 0x3FFFU) << 4;
  d.stride_bytes = static_cast<u32>((bits >> 32) & 0x3FFFU) << 4;
  d.base_offset = static_cast<u32>((bits >> 49) & 7U);
  d.swizzle = static_cast<Swizzle>((bits >> 62) & 3U);
  return d;
}

// The descriptor of the operand `bytes` further on in the same buffer
// (bytes a multiple of 16): only the start field moves, and in the low word
// alone (a shared-memory address below 256 KB never carries out of its 14
// bits), so a GEMM's k-steps cost one integer add each.
ATTUNE_HOST_DEVICE constexpr u64 advance_descriptor(u64 descriptor, u32 bytes) {
  return (descriptor & 0xFFFFFFFF00000000ULL) | (static_cast<u32>(descriptor) + (bytes >> 4));
}

// The `bytes` argument of advance_descriptor that takes a descriptor whose
// LBO is 0 to the operand `bytes` further on with LBO `leading_bytes`
// (both multiples of 16, leading_bytes below 2^16 so the sum fits 32 bits):
// the start and LBO fields sit in the low word and neither carries out of
// its 14 bits, so a descriptor of any buffer is one add from shared
// memory's own.
ATTUNE_HOST_DEVICE constexpr u32 descriptor_offset(u32 bytes, u32 leading_bytes) {
  return bytes + (leading_bytes << 16);
}

// How an operand is stored: K-major (A as M x K rows, B as N x K rows: the
// ISA's imm-trans 0) or MN-major (rows along K, M or N contiguous: imm-trans 1).
enum class Major : u32 { kK = 0, kMN = 1 };

// The logical byte address (before swizzle_address) of element (mn, k) of a
// 16-bit operand of one wgmma (k < 16), in the canonical layouts of
// 9.7.15.5.1.2; of an 8-bit one (e4m3, e5m2: k < 32, K-major only, the
// same 16-byte rows holding 16 elements) with element_bytes 1. With S the
// span and T = 16 bytes of elements:
//   K-major,  none:     8 rows of 16 B form a core matrix; SBO steps 8 rows
//                       (M/N), LBO steps the second 8 elements of K.
//   K-major,  swizzled: rows of S bytes, 8 rows an atom; SBO steps 8 rows;
//                       the 16 K elements are contiguous (LBO unused).
//   MN-major, none:     8 K-rows of 16 B (8 M/N elements) form a core matrix;
//                       SBO steps 8 M/N elements, LBO steps 8 K-rows.
//   MN-major, swizzled: 8 K-rows of S bytes (S/2 M/N elements) form an atom;
//                       LBO steps S/2 M/N elements, SBO steps 8 K-rows.
ATTUNE_HOST_DEVICE constexpr u32 operand_address(const MatrixDescriptor& d, Major major, i32 mn, i32 k,
                                                 i32 element_bytes = 2) {
  const u32 m = static_cast<u32>(mn);
  const u32 kk = static_cast<u32>(k);
  const u32 span = static_cast<u32>(swizzle_span(d.swizzle));
  if (major == Major::kK) {
    const u32 e = static_cast<u32>(element_bytes);
    const u32 per_row = 16 / e;  // elements in a core matrix row
    if (d.swizzle == Swizzle::kNone) {
      return d.start + (m % 8) * 16 + (m / 8) * d.stride_bytes + (kk % per_row) * e + (kk / per_row) * d.leading_bytes;
    }
    return d.start + (m % 8) * span + (m / 8) * d.stride_bytes + kk * e;
  }
  if (d.swizzle == Swizzle::kNone) {
    return d.start + (m % 8) * 2 + (m / 8) * d.stride_bytes + (kk % 8) * 16 + (kk / 8) * d.leading_bytes;
  }
  const u32 per_row = span / 2;
  return d.start + (m % per_row) * 2 + (m / per_row) * d.leading_bytes + (kk % 8) * span + (kk / 8) * d.stride_bytes;
}

// Where element (mn, k) is read from: operand_address, swizzled.
ATTUNE_HOST_DEVICE constexpr u32 operand_shared_address(const MatrixDescriptor& d, Major major, i32 mn, i32 k,
                                                        i32 element_bytes = 2) {
  return swizzle_address(d.swizzle, operand_address(d, major, mn, k, element_bytes));
}

// --- register fragments (one warpgroup: 4 warps, 128 threads) -----------

inline constexpr i32 kWarpgroupSize = 128;
inline constexpr i32 kWgmmaM = 64;
inline constexpr i32 kWgmmaK = 16;   // for 16-bit inputs
inline constexpr i32 kWgmmaK8 = 32;  // for 8-bit inputs (e4m3, e5m2)

// Accumulator register i (0 .. N/2-1) of thread t (0..127) of an m64nN
// fp32 accumulator: warp w = t / 32 owns rows 16w..16w+15; within 8 columns
// the layout is mma.m16n8's C fragment.
ATTUNE_HOST_DEVICE constexpr i32 accumulator_row(i32 t, i32 i) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
ATTUNE_HOST_DEVICE constexpr i32 accumulator_col(i32 t, i32 i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

// Half h (0 low, 1 high) of register q (0..3) of thread t of a register A
// operand (m64k16, 16-bit): mma.m16n8k16's A fragment, warp w on rows 16w...
ATTUNE_HOST_DEVICE constexpr i32 a_fragment_row(i32 t, i32 q) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (q % 2); }
ATTUNE_HOST_DEVICE constexpr i32 a_fragment_col(i32 t, i32 q, i32 h) { return 8 * (q / 2) + 2 * (t % 4) + h; }
// Byte h (0..3) of register q of an 8-bit register A operand (m64k32): the
// same bytes of the same registers as the 16-bit fragment, so the row is
// a_fragment_row's and the column twice as fine (mma.m16n8k32's A).
ATTUNE_HOST_DEVICE constexpr i32 a8_fragment_col(i32 t, i32 q, i32 h) { return 16 * (q / 2) + 4 * (t % 4) + h; }

}  // namespace attune::sm90
