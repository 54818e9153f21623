// P V on 8-bit wgmma without moving P between threads (issue 35's Hopper
// fp8 forward). The S accumulator of a warp holds, per row and 8-key tile,
// keys 2t and 2t+1 of thread t (t = lane % 4); the 8-bit A operand of a k32
// wgmma wants keys 4t .. 4t+3 in each register (sm90::a8_fragment_col).
// Rather than shuffle P into that order (FlashAttention-3 permutes bytes in
// registers), the producer writes V's rows into the transposed, K-major tile
// in the order the accumulator already has: A column c of a 32-key step
// stands for key p_key(c), and V's slot c holds that key's row. The sum
// over a step's 32 keys is the same in any order.
//
//   u32 a[4]; pack_p_fp8<Fp8::kE4M3>(s.tile(0, 4j), s.tile(0, 4j+1), s.tile(0, 4j+2), s.tile(0, 4j+3), a);
//   // Vt[d][32 j + c] = V[32 j + p_key(c)][d]; then mma_rs_fp8 over slot step j
#pragma once

#include "templates/primitives/primitives.h"

namespace attune::sm90_fp8 {

// The key (0..31, within a 32-key step) that A column c of the step holds:
// register q's byte h of thread t is column 16 (q / 2) + 4 t + h and holds
// accumulator tile 2 (q / 2) + h / 2, column 2 t + h % 2.
ATTUNE_HOST_DEVICE constexpr i32 p_key(i32 column) {
  const i32 half = column / 16;  // registers 2, 3: the step's keys 16..31
  const i32 t = (column % 16) / 4;
  const i32 h = column % 4;
  return 16 * half + 8 * (h / 2) + 2 * t + h % 2;
}

// The A operand of one k32 step from the accumulators of its four 8-key
// tiles (mma.sync's C fragment: {row g: keys 2t, 2t+1; row g+8: the same}),
// rounded to F as cvt.rn.satfinite does; register order follows
// sm90::a_fragment_row (rows g, g+8, g, g+8).
template <Fp8 F>
ATTUNE_DEVICE void pack_p_fp8(const float (&t0)[4], const float (&t1)[4], const float (&t2)[4], const float (&t3)[4],
                              u32 (&a)[4]) {
  a[0] =
      static_cast<u32>(dev::pack_fp8x2<F>(t0[0], t0[1])) | (static_cast<u32>(dev::pack_fp8x2<F>(t1[0], t1[1])) << 16);
  a[1] =
      static_cast<u32>(dev::pack_fp8x2<F>(t0[2], t0[3])) | (static_cast<u32>(dev::pack_fp8x2<F>(t1[2], t1[3])) << 16);
  a[2] =
      static_cast<u32>(dev::pack_fp8x2<F>(t2[0], t2[1])) | (static_cast<u32>(dev::pack_fp8x2<F>(t3[0], t3[1])) << 16);
  a[3] =
      static_cast<u32>(dev::pack_fp8x2<F>(t2[2], t2[3])) | (static_cast<u32>(dev::pack_fp8x2<F>(t3[2], t3[3])) << 16);
}

}  // namespace attune::sm90_fp8
