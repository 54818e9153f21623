#include "runtime/cuda/device_modifiers.h"

#include <vector>

namespace attune::cuda {

DeviceModifiers::DeviceModifiers(Driver& driver, std::span<const float> sinks, std::span<const float> alibi_slopes,
                                 std::size_t dsink_elements) {
  std::vector<DeviceBuffers::Spec> specs;
  if (!sinks.empty()) specs.push_back({sinks.data(), sinks.size_bytes()});
  if (!alibi_slopes.empty()) specs.push_back({alibi_slopes.data(), alibi_slopes.size_bytes()});
  if (dsink_elements > 0) specs.push_back({nullptr, dsink_elements * sizeof(float)});
  if (specs.empty()) return;
  buffers_ = std::make_unique<DeviceBuffers>(driver, specs);
  std::size_t next = 0;
  if (!sinks.empty()) sinks_ = static_cast<const float*>(buffers_->at(next++));
  if (!alibi_slopes.empty()) alibi_slopes_ = static_cast<const float*>(buffers_->at(next++));
  if (dsink_elements > 0) dsink_ = static_cast<float*>(buffers_->at(next));
}

}  // namespace attune::cuda
