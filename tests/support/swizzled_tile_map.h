// The tensor map the TMA tests share: a 2-D tensor of 2-byte elements, 64
// to a 128-byte row, read in boxes of whole rows with the 128-byte swizzle
// (the swizzle span is exactly one row).
#pragma once

#include <cstdint>

#include "core/tensor_map.h"

namespace attune::testing {

inline TensorMapSpec swizzled_tile_map(const void* address, std::uint64_t rows, std::uint32_t box_rows) {
  TensorMapSpec s;
  s.address = address;
  s.rank = 2;
  s.element_bytes = 2;
  s.dims = {64, rows, 1, 1, 1};
  s.strides = {128, 0, 0, 0};
  s.box = {64, box_rows, 1, 1, 1};
  s.swizzle = sm90::Swizzle::k128B;
  return s;
}

}  // namespace attune::testing
