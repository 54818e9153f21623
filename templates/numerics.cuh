// Constants and float helpers every kernel shares, defined once.
#pragma once

#include "templates/primitives/primitives.h"

namespace attune {

inline constexpr float kLn2 = 0.6931471805599453f;    // ln 2: base-2 log-sum-exp to natural units
inline constexpr float kLog2e = 1.4426950408889634f;  // log2 e: natural units to base 2

// One FMNMX, where `a > b ? a : b` costs a compare and a select. A NaN
// score is passed over by the maximum but still reaches l through its
// exponential.
ATTUNE_DEVICE float max2(float a, float b) { return dev::fmax(a, b); }

ATTUNE_DEVICE i32 min2(i32 a, i32 b) { return a < b ? a : b; }

// x within [lo, hi] (lo <= hi): min and max, no branch.
ATTUNE_DEVICE i32 clamp(i32 x, i32 lo, i32 hi) { return x < lo ? lo : x > hi ? hi : x; }

// Sets every element of a register tile to `value` (unrolled, so the tile
// stays in registers).
template <int kA, int kB, int kC>
ATTUNE_DEVICE void fill(float (&tile)[kA][kB][kC], float value) {
  ATTUNE_UNROLL
  for (int a = 0; a < kA; ++a) {
    ATTUNE_UNROLL
    for (int b = 0; b < kB; ++b) {
      ATTUNE_UNROLL
      for (int c = 0; c < kC; ++c) tile[a][b][c] = value;
    }
  }
}

}  // namespace attune
