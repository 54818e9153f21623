#include "core/tensor_map.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace attune {

namespace {

constexpr std::uint64_t kMagic = 0x4154554E454D4150ULL;  // "ATUNEMAP"

[[noreturn]] void refuse(const std::string& field, const std::string& got, const std::string& expected) {
  throw InvalidArgument("tensor map " + field + ": got " + got + "; expected " + expected);
}

std::string indexed(const char* field, int i) { return std::string(field) + "[" + std::to_string(i) + "]"; }

}  // namespace

std::uint64_t box_bytes(const TensorMapSpec& spec) {
  std::uint64_t bytes = static_cast<std::uint64_t>(spec.element_bytes);
  for (int i = 0; i < spec.rank; ++i) bytes *= spec.box[static_cast<std::size_t>(i)];
  return bytes;
}

void check_tensor_map(const TensorMapSpec& s) {
  if (s.rank < 1 || s.rank > 5) refuse("rank", std::to_string(s.rank), "1..5");
  if (s.element_bytes != 1 && s.element_bytes != 2 && s.element_bytes != 4 && s.element_bytes != 8) {
    refuse("element size", std::to_string(s.element_bytes) + " bytes", "1, 2, 4 or 8 bytes");
  }
  const auto address = reinterpret_cast<std::uintptr_t>(s.address);
  if (address == 0 || address % 16 != 0) {
    refuse("global address", std::to_string(address), "a non-null address aligned to 16 bytes");
  }
  for (int i = 0; i < s.rank; ++i) {
    const std::uint64_t dim = s.dims[static_cast<std::size_t>(i)];
    if (dim == 0 || dim > (std::uint64_t{1} << 32)) refuse(indexed("dims", i), std::to_string(dim), "1..2^32");
    const std::uint32_t box = s.box[static_cast<std::size_t>(i)];
    if (box == 0 || box > 256) refuse(indexed("box", i), std::to_string(box), "1..256 elements");
    const std::uint32_t step = s.element_strides[static_cast<std::size_t>(i)];
    if (step == 0 || step > 8) refuse(indexed("element_strides", i), std::to_string(step), "1..8");
  }
  for (int i = 0; i + 1 < s.rank; ++i) {
    const std::uint64_t stride = s.strides[static_cast<std::size_t>(i)];
    if (stride % 16 != 0 || stride >= (std::uint64_t{1} << 40)) {
      refuse(indexed("strides", i), std::to_string(stride) + " bytes", "a multiple of 16 below 2^40");
    }
  }
  const std::uint64_t inner_bytes = static_cast<std::uint64_t>(s.box[0]) * static_cast<std::uint64_t>(s.element_bytes);
  if (inner_bytes % 16 != 0) {
    refuse("box[0]", std::to_string(s.box[0]) + " elements (" + std::to_string(inner_bytes) + " bytes)",
           "a multiple of 16 bytes");
  }
  if (s.swizzle != sm90::Swizzle::kNone && inner_bytes > static_cast<std::uint64_t>(sm90::swizzle_span(s.swizzle))) {
    refuse("box[0]",
           std::to_string(inner_bytes) + " bytes with the " + std::to_string(sm90::swizzle_span(s.swizzle)) +
               "-byte swizzle",
           "at most the swizzle span, " + std::to_string(sm90::swizzle_span(s.swizzle)) + " bytes");
  }
}

// The emulator's layout of the 128 bytes, after the magic word.
struct Packed {
  const void* address;
  std::array<std::uint64_t, 4> strides;
  std::array<std::uint32_t, 5> dims_minus_one;
  std::array<std::uint16_t, 5> box;
  std::array<std::uint8_t, 5> element_strides;
  std::uint8_t rank;
  std::uint8_t element_bytes;
  std::uint8_t swizzle;
  std::uint8_t fp32;
};
static_assert(sizeof(Packed) + sizeof(std::uint64_t) <= sizeof(TensorMap), "the description fits in 128 bytes");

TensorMap encode_emulated_tensor_map(const TensorMapSpec& spec) {
  check_tensor_map(spec);
  Packed p{};
  p.address = spec.address;
  p.strides = spec.strides;
  for (std::size_t i = 0; i < 5; ++i) {
    p.dims_minus_one[i] = spec.dims[i] == 0 ? 0 : static_cast<std::uint32_t>(spec.dims[i] - 1);
    p.box[i] = static_cast<std::uint16_t>(spec.box[i]);
    p.element_strides[i] = static_cast<std::uint8_t>(spec.element_strides[i]);
  }
  p.rank = static_cast<std::uint8_t>(spec.rank);
  p.element_bytes = static_cast<std::uint8_t>(spec.element_bytes);
  p.swizzle = static_cast<std::uint8_t>(spec.swizzle);
  p.fp32 = spec.fp32 ? 1 : 0;
  TensorMap map{};
  map.words[0] = kMagic;
  std::memcpy(&map.words[1], &p, sizeof p);
  return map;
}

bool decode_emulated_tensor_map(const TensorMap& map, TensorMapSpec* spec) {
  if (map.words[0] != kMagic) return false;
  Packed p{};
  std::memcpy(&p, &map.words[1], sizeof p);
  *spec = TensorMapSpec{};
  spec->address = p.address;
  spec->strides = p.strides;
  for (std::size_t i = 0; i < 5; ++i) {
    spec->dims[i] = static_cast<std::uint64_t>(p.dims_minus_one[i]) + 1;
    spec->box[i] = p.box[i];
    spec->element_strides[i] = p.element_strides[i];
  }
  spec->rank = p.rank;
  spec->element_bytes = p.element_bytes;
  spec->swizzle = static_cast<sm90::Swizzle>(p.swizzle);
  spec->fp32 = p.fp32 != 0;
  return true;
}

}  // namespace attune
