// NumPy .npy file I/O: the on-disk format attune uses for tensors.
//
// read() accepts format versions 1.0, 2.0 and 3.0, C-order arrays of float16,
// float32, float64, int32 and int64 in either byte order. write() produces
// version 1.0 files (2.0 when the header does not fit) whose data starts at a
// multiple of 64 bytes, and replaces the target atomically.
// Every failure is an attune::IoError naming the file (attune::InvalidArgument
// for a write whose shape does not match its data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace attune::npy {

enum class ElementType { kFloat16, kFloat32, kFloat64, kInt32, kInt64 };

// "float16", "float32", "float64", "int32" or "int64".
std::string_view to_string(ElementType type);

// Bytes per element: 2, 4, 8, 4 or 8.
std::size_t element_size(ElementType type);

struct Array {
  ElementType type = ElementType::kFloat32;
  std::vector<int64_t> shape;    // () for a scalar
  std::vector<std::byte> bytes;  // elements in native byte order, C order

  // Product of the dimensions (1 for a scalar, 0 if any dimension is 0).
  int64_t size() const;

  // Every element as float32: float16 exactly, float64 and the integer types
  // rounded to nearest.
  std::vector<float> to_float32() const;

  // Every element as int32: int32 as is, int64 after a range check. `what`
  // names the array in the error message (e.g. "seq_lens.npy"). Throws
  // IoError for float arrays and for int64 values outside the int32 range.
  std::vector<int32_t> to_int32(std::string_view what) const;
};

// Reads a whole .npy file. Throws IoError on any problem with the file.
Array read(const std::filesystem::path& path);

// Writes a C-order '<f4' / '<i4' array. The product of `shape` must equal
// data.size() (else InvalidArgument). The file is written to a temporary file
// in the same directory, fsync'ed and renamed over `path`, so readers never
// see a partial file; on failure the temporary file is removed (IoError).
void write(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data);
void write(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const int32_t> data);

}  // namespace attune::npy
