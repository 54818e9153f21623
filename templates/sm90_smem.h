// The shared-memory tiles of the Hopper kernels (flash_fwd_sm90,
// flash_bwd_sm90): every 16-bit buffer is a sequence of boxes of 64
// head-dim columns, each [rows x 128 bytes] on a 128-byte-swizzle atom, as
// TMA writes them and as wgmma's descriptors read them.
#pragma once

#include "templates/primitives/hopper_layout.h"

namespace attune::sm90_smem {

// 16-bit elements of 128-byte rows: a box of 64 columns.
inline constexpr i32 kBoxCols = 64;
inline constexpr i32 kRowBytes = 128;
inline constexpr sm90::Swizzle kSwizzle = sm90::Swizzle::k128B;
inline constexpr u32 kAtomStride = 8 * kRowBytes;  // SBO: 8 rows of 128 bytes

}  // namespace attune::sm90_smem
