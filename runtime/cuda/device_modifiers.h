// The score modifiers' tensors in device memory for the cuda backend (the
// CLI's inputs, the tuner's random ones), and room for a backward's dsink.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/problem.h"
#include "runtime/cuda/cuda_driver.h"

namespace attune::cuda {

class DeviceModifiers {
 public:
  // Copies the sinks and the ALiBi slopes (nothing is allocated for an
  // empty one: its pointer stays null) and allocates `dsink_elements`
  // floats; what is copied lives as long as this object.
  DeviceModifiers(Driver& driver, std::span<const float> sinks, std::span<const float> alibi_slopes,
                  std::size_t dsink_elements = 0);
  // Anything that holds the two host arrays as `sinks` and `alibi_slopes`.
  template <class Inputs>
  DeviceModifiers(Driver& driver, const Inputs& inputs, std::size_t dsink_elements = 0)
      : DeviceModifiers(driver, inputs.sinks, inputs.alibi_slopes, dsink_elements) {}

  const float* sinks() const { return sinks_; }
  const float* alibi_slopes() const { return alibi_slopes_; }
  float* dsink() const { return dsink_; }
  ModifierTensors tensors() const { return {sinks_, alibi_slopes_}; }

 private:
  std::unique_ptr<DeviceBuffers> buffers_;
  const float* sinks_ = nullptr;
  const float* alibi_slopes_ = nullptr;
  float* dsink_ = nullptr;
};

}  // namespace attune::cuda
