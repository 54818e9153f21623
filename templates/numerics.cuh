// Constants and float helpers every kernel shares, defined once.
#pragma once

#include "templates/primitives/primitives.h"

namespace attune {

inline constexpr float kLn2 = 0.6931471805599453f;    // ln 2: base-2 log-sum-exp to natural units
inline constexpr float kLog2e = 1.4426950408889634f;  // log2 e: natural units to base 2

ATTUNE_DEVICE float max2(float a, float b) { return a > b ? a : b; }

}  // namespace attune
