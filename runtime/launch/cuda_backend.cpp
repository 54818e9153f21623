#include "runtime/launch/cuda_backend.h"

#include "core/error.h"

namespace attune {

namespace {

class CudaCall final : public LaunchBackend::Call {
 public:
  CudaCall(cuda::Driver& driver, int device, void* stream, TensorMapCache& maps)
      : driver_(driver), device_(device), stream_(stream), maps_(maps) {}
  void buffer(const char* /*name*/, const void* /*data*/, std::size_t /*bytes*/) override {}
  void launch(const LoadedKernel& kernel, const LaunchConfig& config, const void* params,
              std::size_t params_size) override {
    driver_.launch({kernel.function, device_, kernel.param_size}, config, params, params_size, stream_);
  }
  TensorMap tensor_map(const TensorMapSpec& spec) override {
    return maps_.get(spec, [&](const TensorMapSpec& s) { return driver_.encode_tensor_map(s); });
  }
  void zero(void* data, std::size_t words) override { driver_.zero_async(device_, data, words, stream_); }

 private:
  cuda::Driver& driver_;
  int device_;
  void* stream_;
  TensorMapCache& maps_;
};

LoadedKernel loaded_kernel(const Variant& variant, DType dtype, const cuda::Driver::Function& function) {
  return {variant, dtype, function.handle, function.param_size};
}

}  // namespace

CudaBackend::CudaBackend(cuda::Driver& driver, int device, std::string arch, int sm_count, CompilerService& compiler)
    : driver_(driver), device_(device), arch_(std::move(arch)), compiler_(compiler), sm_count_(sm_count) {}

namespace {
std::string key_of(const Variant& variant, DType dtype) { return variant.id() + "/" + std::string(to_string(dtype)); }
}  // namespace

bool CudaBackend::loaded(const Variant& variant, DType dtype) {
  const std::string key = key_of(variant, dtype);
  const std::lock_guard<std::mutex> lock(mutex_);
  return loaded_.contains(key);
}

LoadedKernel CudaBackend::load(const Variant& variant, DType dtype, Compile compile) {
  const std::string key = key_of(variant, dtype);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = loaded_.find(key); it != loaded_.end()) return loaded_kernel(variant, dtype, it->second);
  }
  if (compile == Compile::kRefused) {
    throw InvalidArgument("kernel " + key +
                          ": not loaded yet, and the stream is capturing a CUDA graph (compiling and loading "
                          "would break the capture); expected a plan made before the capture (Runtime::plan, "
                          "attune_plan_create), or one uncaptured call first");
  }
  const CompilerService::Result compiled = compiler_.compile({variant, dtype, arch_}).get();
  if (!compiled->ok) throw Error("compiling " + variant.id() + " for " + arch_ + " failed:\n" + compiled->log);
  const cuda::Driver::Module module = driver_.load_module(device_, compiled->cubin);
  const cuda::Driver::Function function = driver_.function(module, compiled->lowered_name);
  driver_.set_max_dynamic_shared(function, variant.shared_bytes());
  const std::lock_guard<std::mutex> lock(mutex_);
  // A racing loader's module stays loaded; harmless.
  return loaded_kernel(variant, dtype, loaded_.emplace(key, function).first->second);
}

std::unique_ptr<LaunchBackend::Call> CudaBackend::begin(void* stream) {
  return std::make_unique<CudaCall>(driver_, device_, stream, tensor_maps_);
}

void* CudaBackend::allocate(std::size_t bytes) { return driver_.allocate(device_, bytes); }
void CudaBackend::release(void* pointer) { driver_.release(pointer); }
void CudaBackend::copy_to_device(void* dst, const void* src, std::size_t bytes) {
  driver_.copy_to_device(dst, src, bytes);
}
void CudaBackend::synchronize(void* stream) { driver_.synchronize(stream); }

}  // namespace attune
