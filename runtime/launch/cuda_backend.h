// The CUDA backend: variants compiled with NVRTC (through the kernel cache),
// loaded into the device's primary context and launched with the driver.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/launch/backend.h"
#include "runtime/launch/tensor_map_cache.h"

namespace attune {

class CudaBackend final : public LaunchBackend {
 public:
  // `compiler` must outlive the backend; `arch` is the NVRTC target of the
  // device, `sm_count` its multiprocessors.
  CudaBackend(cuda::Driver& driver, int device, std::string arch, int sm_count, CompilerService& compiler);
  LoadedKernel load(const Variant& variant, DType dtype, Compile compile) override;
  bool loaded(const Variant& variant, DType dtype) override;
  std::unique_ptr<Call> begin(void* stream) override;
  void* allocate(std::size_t bytes) override;
  void release(void* pointer) override;
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override;
  void synchronize(void* stream) override;
  bool host_memory() const override { return false; }
  int sm_count() const override { return sm_count_; }
  TensorMapCache& tensor_maps() { return tensor_maps_; }

 private:
  cuda::Driver& driver_;
  int device_;
  std::string arch_;
  CompilerService& compiler_;
  int sm_count_;
  std::mutex mutex_;
  std::map<std::string, cuda::Driver::Function> loaded_;  // by "variant id/dtype"
  TensorMapCache tensor_maps_;
};

}  // namespace attune
