#include "runtime/cuda/device_call.h"

namespace attune::cuda {

void run_on_device(Driver& driver, void* stream, const std::vector<HostArray>& arrays,
                   const std::function<void(const std::vector<void*>&)>& call) {
  std::vector<DeviceBuffers::Spec> specs;
  for (const HostArray& a : arrays) {
    if (a.bytes > 0) specs.push_back({a.to_device, a.bytes});
  }
  const DeviceBuffers buffers(driver, specs);
  std::vector<void*> device(arrays.size(), nullptr);  // an empty array's pointer stays null
  for (std::size_t i = 0, next = 0; i < arrays.size(); ++i) {
    if (arrays[i].bytes > 0) device[i] = buffers.at(next++);
  }
  call(device);
  driver.synchronize(stream);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].from_device != nullptr && arrays[i].bytes > 0) {
      driver.copy_to_host(arrays[i].from_device, device[i], arrays[i].bytes);
    }
  }
}

}  // namespace attune::cuda
