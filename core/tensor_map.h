// A TMA tensor map as cuTensorMapEncodeTiled takes it (CUDA driver API 6.30),
// and the rules the driver checks, one message each: the CUDA backend builds
// the real map through the driver after this check, the emulator builds its
// own description with the same check, so a map that the GPU would refuse
// fails the same way on a laptop.
//
//   TensorMapSpec q{.address = ptr, .rank = 3, .element_bytes = 2,
//                   .dims = {128, 4096, 8}, .strides = {256, 1048576},
//                   .box = {64, 128, 1}, .swizzle = sm90::Swizzle::k128B};
//   check_tensor_map(q);   // throws InvalidArgument("tensor map box[0]: ...")
#pragma once

#include <array>
#include <cstdint>

#include "templates/primitives/hopper_layout.h"

namespace attune {

struct TensorMapSpec {
  const void* address = nullptr;
  int rank = 2;                            // 1..5
  int element_bytes = 2;                   // 1, 2, 4 or 8
  std::array<std::uint64_t, 5> dims{};     // elements, innermost first
  std::array<std::uint64_t, 4> strides{};  // bytes between steps of dims 1..rank-1
  std::array<std::uint32_t, 5> box{};      // elements a load or store moves, innermost first
  std::array<std::uint32_t, 5> element_strides{1, 1, 1, 1, 1};
  sm90::Swizzle swizzle = sm90::Swizzle::kNone;
  // 4-byte elements are fp32 (CU_TENSOR_MAP_DATA_TYPE_FLOAT32), the type a
  // TMA reduce-add adds as; otherwise elements are bits moved as they are.
  bool fp32 = false;
};

// Throws InvalidArgument ("tensor map <field>: got <value>; expected <rule>")
// for the first rule of cuTensorMapEncodeTiled the description breaks.
void check_tensor_map(const TensorMapSpec& spec);

// Bytes of shared memory one box fills.
std::uint64_t box_bytes(const TensorMapSpec& spec);

// The emulator's tensor map: the checked description in the 128 bytes.
TensorMap encode_emulated_tensor_map(const TensorMapSpec& spec);
// False when the 128 bytes are not one (a GPU map, or garbage).
bool decode_emulated_tensor_map(const TensorMap& map, TensorMapSpec* spec);

}  // namespace attune
