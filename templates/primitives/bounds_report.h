// What a kernel leaves for the host when it clamps a length or a page index
// it read from device memory (the graph-safe plans: cache lengths and block
// tables change between runs, so the host cannot check them first).
//
// A length past its block-table row (or past Sk) is cut to the row's
// capacity; a page outside the pool is read as page 0. The run's output is
// then wrong, but nothing outside the pool or the table is read, and the
// first such event of each generation lands here: the CUDA kernels write it
// through the module global `attune_bounds_report` (host-mapped memory the
// runtime installs when it looks a kernel up), the emulator through a hook.
// The host reads it with attune_bounds_report(); clearing it starts a new
// generation. Plain data, shared by the kernels and the host.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

enum BoundsKind : u32 {
  kBoundsLength = 1,  // batch's length `value` past `limit`, the keys its row (or Sk) can address
  kBoundsPage = 2,    // block_table[batch, index] = `value`, outside the pool of `limit` pages
};

struct BoundsReport {
  u32 magic;       // kBoundsReportMagic once a report is complete
  u32 generation;  // bumped by the host when it clears the report; a kernel reports once per generation
  u32 kind;        // BoundsKind
  i32 batch;
  i32 index;
  i32 value;
  i32 limit;
  u32 reserved;
};

inline constexpr u32 kBoundsReportMagic = 0x444E4F42U;  // "BOND" in memory order

}  // namespace attune
