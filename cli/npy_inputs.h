// Reading `attune attention`'s NumPy inputs: float tensors rounded to the
// storage dtype, int32 length arrays and block tables, each checked with a
// message naming the file and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/npy.h"

namespace attune::cli {

// A float16/32/64 array; integer arrays are refused.
npy::Array read_floats(const std::string& path, const char* name);
// A 1-D integer array as int32 (empty path: empty).
std::vector<int32_t> read_lengths(const std::string& path, const char* name);
// A block table: int32 [B, max_pages] for `batch` sequences, flattened row-major.
std::vector<int32_t> read_block_table(const std::string& path, int64_t batch);
// Rounds float inputs to the storage dtype (round to nearest even).
std::vector<std::uint16_t> to_storage(const npy::Array& array, DType dtype);
std::vector<float> to_float32(const std::vector<double>& values);

}  // namespace attune::cli
