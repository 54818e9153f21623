#include "cli/npy_inputs.h"

#include "core/error.h"

namespace attune::cli {

npy::Array read_floats(const std::string& path, const char* name) {
  npy::Array array = npy::read(path);
  if (array.type == npy::ElementType::kInt32 || array.type == npy::ElementType::kInt64) {
    throw InvalidArgument(path + ": " + name + " has dtype " + std::string(npy::to_string(array.type)) +
                          "; expected a float32 or float16 array");
  }
  return array;
}

std::vector<int32_t> read_lengths(const std::string& path, const char* name) {
  if (path.empty()) return {};
  const npy::Array array = npy::read(path);
  if (array.shape.size() != 1) {
    throw InvalidArgument(path + ": " + name + " has " + std::to_string(array.shape.size()) +
                          " dimensions; expected a 1-D integer array");
  }
  return array.to_int32(path + " (" + name + ")");
}

std::vector<int32_t> read_block_table(const std::string& path, int64_t batch) {
  const npy::Array array = npy::read(path);
  if (array.shape.size() != 2) {
    throw InvalidArgument(path + ": block_table has " + std::to_string(array.shape.size()) +
                          " dimensions; expected a 2-D integer array [B, max_pages]");
  }
  if (array.shape[0] != batch) {
    throw InvalidArgument(path + ": block_table has " + std::to_string(array.shape[0]) +
                          " rows; expected B = " + std::to_string(batch) + " (one per sequence of Q)");
  }
  return array.to_int32(path + " (block_table)");
}

std::vector<std::uint16_t> to_storage(const npy::Array& array, DType dtype) {
  const std::vector<float> values = array.to_float32();
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bits(dtype, values[i]);
  return bits;
}

std::vector<float> to_float32(const std::vector<double>& values) { return {values.begin(), values.end()}; }

}  // namespace attune::cli
