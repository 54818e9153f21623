#include "runtime/runtime.h"

#include <map>
#include <mutex>

#include "core/error.h"
#include "runtime/compiler_service.h"
#include "runtime/cuda_driver.h"
#include "runtime/emu_backward.h"
#include "runtime/emu_forward.h"
#include "runtime/flash_bwd_params.h"
#include "runtime/flash_decode_params.h"
#include "runtime/flash_fwd_params.h"

namespace attune {

std::string_view to_string(Backend backend) { return backend == Backend::kCuda ? "cuda" : "emu"; }

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "cuda") return Backend::kCuda;
  if (name == "emu") return Backend::kEmu;
  return std::nullopt;
}

namespace {

// Device copies of a problem's index arrays, freed when the call ends.
class DeviceLengthsUpload {
 public:
  DeviceLengthsUpload(cuda::Driver& driver, int device, const AttentionProblem& p) : driver_(driver) {
    lengths_.cu_seqlens_q = upload(device, p.cu_seqlens_q);
    lengths_.cu_seqlens_k = upload(device, p.cu_seqlens_k);
    lengths_.seqlens_k = upload(device, p.seqlens_k);
    block_table_ = upload(device, p.block_table);
  }
  ~DeviceLengthsUpload() {
    for (void* ptr : owned_) driver_.release(ptr);
  }
  DeviceLengthsUpload(const DeviceLengthsUpload&) = delete;
  DeviceLengthsUpload& operator=(const DeviceLengthsUpload&) = delete;
  const DeviceLengths& lengths() const { return lengths_; }
  DecodeDeviceArrays decode_arrays() const { return {lengths_.seqlens_k, block_table_}; }
  // Scratch memory freed with the uploads.
  void* scratch(int device, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    owned_.push_back(driver_.allocate(device, bytes));
    return owned_.back();
  }
  bool any() const { return !owned_.empty(); }

 private:
  const std::int32_t* upload(int device, const std::vector<std::int32_t>& host) {
    if (host.empty()) return nullptr;
    void* ptr = driver_.allocate(device, host.size() * sizeof(std::int32_t));
    owned_.push_back(ptr);
    driver_.copy_to_device(ptr, host.data(), host.size() * sizeof(std::int32_t));
    return static_cast<const std::int32_t*>(ptr);
  }

  cuda::Driver& driver_;
  DeviceLengths lengths_;
  const std::int32_t* block_table_ = nullptr;
  std::vector<void*> owned_;
};

}  // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  std::string device_key;
  std::string device_name;
  ArchLimits arch;
  cuda::Driver* driver = nullptr;
  std::unique_ptr<KernelCache> cache;
  std::unique_ptr<CompilerService> compiler;
  std::unique_ptr<Dispatcher> dispatcher;
  // Loaded kernels by (variant id, dtype).
  std::mutex loaded_mutex;
  std::map<std::string, cuda::Driver::Function> loaded;

  int sm_count = 0;  // what the split heuristic fills

  void launch(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream);
  void launch_decode(const Variant& variant, int splits, const AttentionProblem& problem,
                     const AttentionBuffers& buffers, void* stream);
  void launch_backward(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                       void* stream);

  cuda::Driver::Function function_for(const Variant& variant, DType dtype) {
    const std::string key = variant.id() + "/" + std::string(to_string(dtype));
    {
      const std::lock_guard<std::mutex> lock(loaded_mutex);
      if (auto it = loaded.find(key); it != loaded.end()) return it->second;
    }
    const CompilerService::Result compiled = compiler->compile({variant, dtype, arch.name}).get();
    if (!compiled->ok) throw Error("compiling " + variant.id() + " for " + arch.name + " failed:\n" + compiled->log);
    const cuda::Driver::Module module = driver->load_module(options.device, compiled->cubin);
    const cuda::Driver::Function function = driver->function(module, compiled->lowered_name);
    driver->set_max_dynamic_shared(function, variant.shared_bytes());
    const std::lock_guard<std::mutex> lock(loaded_mutex);
    return loaded.emplace(key, function).first->second;  // a racing loader's module stays loaded; harmless
  }
};

void Runtime::Impl::launch(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                           void* stream) {
  if (options.backend == Backend::kEmu) {
    emulate_forward(problem, buffers, variant);
    return;
  }
  if (problem.is_paged()) {
    throw InvalidArgument("forward: a paged KV cache; expected the decode operation for paged caches");
  }
  if (problem.batch == 0 || max_query_rows(problem) == 0) return;
  const cuda::Driver::Function function = function_for(variant, problem.dtype);
  const DeviceLengthsUpload lengths(*driver, options.device, problem);
  const FlashFwdParams params = flash_fwd_params(problem, buffers, lengths.lengths());
  const LaunchConfig config =
      flash_fwd_launch(problem, variant.value("kBlockM"), variant.threads(), variant.shared_bytes());
  driver->launch(function, config, &params, sizeof(params), stream);
  if (lengths.any()) driver->synchronize(stream);  // the uploads are freed on return
}

void Runtime::Impl::launch_decode(const Variant& variant, int splits, const AttentionProblem& problem,
                                  const AttentionBuffers& buffers, void* stream) {
  if (options.backend == Backend::kEmu) {
    emulate_decode(problem, buffers, variant, splits);
    return;
  }
  check_splits(splits);
  if (problem.batch == 0 || problem.seqlen_q == 0) return;
  const cuda::Driver::Function decode = function_for(variant, problem.dtype);
  DeviceLengthsUpload uploads(*driver, options.device, problem);
  auto* workspace = static_cast<float*>(uploads.scratch(
      options.device, static_cast<std::size_t>(decode_workspace_floats(problem, splits)) * sizeof(float)));
  const FlashDecodeParams params = flash_decode_params(problem, buffers, uploads.decode_arrays(), splits, workspace);
  driver->launch(decode, flash_decode_launch(problem, variant, splits), &params, sizeof(params), stream);
  if (splits > 1) {
    const cuda::Driver::Function combine = function_for(decode_combine_variant(), problem.dtype);
    const FlashDecodeCombineParams merge = flash_decode_combine_params(problem, buffers, splits, workspace);
    driver->launch(combine, flash_decode_combine_launch(problem), &merge, sizeof(merge), stream);
  }
  if (uploads.any()) driver->synchronize(stream);  // the uploads and the workspace are freed on return
}

void Runtime::Impl::launch_backward(const Variant& variant, const AttentionProblem& problem,
                                    const BackwardBuffers& buffers, void* stream) {
  if (options.backend == Backend::kEmu) {
    emulate_backward(problem, buffers, variant);
    return;
  }
  if (variant.kernel->params_type != "attune::FlashBwdParams") {
    throw InvalidArgument("variant " + variant.id() + ": expected a flash_bwd variant for the backward operation");
  }
  if (problem.batch == 0) return;
  DeviceLengthsUpload uploads(*driver, options.device, problem);
  const BackwardWorkspace sizes = backward_workspace(problem, variant);
  auto* workspace = static_cast<float*>(
      uploads.scratch(options.device, static_cast<std::size_t>(sizes.total_floats()) * sizeof(float)));
  const FlashBwdParams params =
      flash_bwd_params(problem, buffers, uploads.lengths(), variant, split_workspace(sizes, workspace));
  const Variant* kernels[] = {&bwd_preprocess_variant(), &variant, &bwd_dq_convert_variant()};
  for (const Variant* kernel : kernels) {
    const LaunchConfig config =
        kernel == &variant ? flash_bwd_launch(problem, variant) : flash_bwd_row_launch(problem, *kernel);
    driver->launch(function_for(*kernel, problem.dtype), config, &params, sizeof(params), stream);
  }
  driver->synchronize(stream);  // the workspace and uploads are freed on return
}

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  if (s.options.backend == Backend::kCuda) {
    s.driver = &cuda::Driver::get();
    const std::vector<cuda::DeviceInfo> devices = s.driver->devices();
    if (s.options.device < 0 || s.options.device >= static_cast<int>(devices.size())) {
      throw InvalidArgument("device: got " + std::to_string(s.options.device) + "; expected 0.." +
                            std::to_string(static_cast<int>(devices.size()) - 1) + " (" +
                            std::to_string(devices.size()) + " CUDA devices)");
    }
    const cuda::DeviceInfo& device = devices[static_cast<std::size_t>(s.options.device)];
    s.device_key = device.key();
    s.device_name = device.name;
    s.arch = require_arch(device.arch());
    s.arch.max_shared_bytes = device.max_shared_per_block_optin;  // what this GPU really allows
    s.sm_count = device.sm_count;
    s.cache = std::make_unique<KernelCache>(KernelCache::Options{
        .directory = s.options.cache_directory.empty() ? KernelCache::default_directory() : s.options.cache_directory});
    s.compiler = std::make_unique<CompilerService>(s.cache.get(), s.options.compile_threads);
  } else {
    s.device_key = kEmulatorDeviceKey;
    s.device_name = "attune emulator (CPU)";
    s.arch = require_arch(kEmulatedArch);
    s.sm_count = kEmulatedSmCount;
  }
  s.dispatcher = std::make_unique<Dispatcher>(s.device_key, s.arch, s.options.tuned, s.sm_count);
}

Runtime::~Runtime() = default;

void Runtime::forward(const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream) {
  validate(problem, buffers);
  if (problem.is_paged()) {
    decode(problem, buffers, {}, stream);  // only the decode kernel reads pages
    return;
  }
  impl_->launch(impl_->dispatcher->choose(problem).variant, problem, buffers, stream);
}

DecodeChoice Runtime::explain_decode(const AttentionProblem& problem, DecodeOptions options) const {
  validate(problem);
  const DispatchChoice dispatched = impl_->dispatcher->resolve(Op::kDecode, problem);
  DecodeChoice choice{dispatched.variant, dispatched.splits,
                      std::string(to_string(dispatched.rule)) + ": " + dispatched.detail};
  if (options.splits != 0) {
    check_splits(options.splits);
    choice.splits = options.splits;
    choice.reason += "; " + std::to_string(options.splits) + " splits as asked";
  }
  return choice;
}

void Runtime::decode(const AttentionProblem& problem, const AttentionBuffers& buffers, DecodeOptions options,
                     void* stream) {
  validate(problem, buffers);
  if (options.splits != 0) check_splits(options.splits);
  const DispatchChoice& choice = impl_->dispatcher->choose(Op::kDecode, problem);
  impl_->launch_decode(choice.variant, options.splits != 0 ? options.splits : choice.splits, problem, buffers, stream);
}

namespace {

// The deterministic twin of a flash_bwd variant: the same tiles with dQ
// summed per key block (kDqAtomic = 0); nullopt when no such variant is valid.
std::optional<Variant> deterministic_twin(const Variant& v) {
  Variant twin = v;
  const auto& tunables = v.kernel->tunables;
  for (std::size_t i = 0; i < tunables.size(); ++i) {
    if (tunables[i].name == "kDqAtomic") twin.values[i] = 0;
  }
  if (!v.kernel->valid(twin.values)) return std::nullopt;
  return twin;
}

}  // namespace

DispatchChoice Runtime::explain_backward(const AttentionProblem& problem, BackwardOptions options) const {
  validate(problem);
  DispatchChoice choice = impl_->dispatcher->resolve(Op::kBackward, problem);
  if (options.deterministic && choice.variant.value("kDqAtomic") != 0) {
    if (const std::optional<Variant> twin = deterministic_twin(choice.variant)) {
      choice.variant = *twin;
      choice.detail += "; its deterministic twin (dQ summed per key block)";
    } else {
      choice.variant = heuristic_backward_variant(problem.dtype, static_cast<int>(problem.head_dim_k),
                                                  static_cast<int>(problem.head_dim_v), impl_->arch, true);
      choice.rule = DispatchRule::kHeuristic;
      choice.detail = "deterministic mode: the heuristic's deterministic variant";
    }
  }
  return choice;
}

void Runtime::backward(const AttentionProblem& problem, const BackwardBuffers& buffers, BackwardOptions options,
                       void* stream) {
  validate(problem, buffers);
  const Variant variant = options.deterministic ? explain_backward(problem, options).variant
                                                : impl_->dispatcher->choose(Op::kBackward, problem).variant;
  impl_->launch_backward(variant, problem, buffers, stream);
}

void Runtime::backward_variant(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                               void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->launch_backward(variant, problem, buffers, stream);
}

void Runtime::decode_variant(const Variant& variant, int splits, const AttentionProblem& problem,
                             const AttentionBuffers& buffers, void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->launch_decode(variant, splits, problem, buffers, stream);
}

void Runtime::forward_variant(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                              void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->launch(variant, problem, buffers, stream);
}

DispatchChoice Runtime::explain(const AttentionProblem& problem) const {
  validate(problem);
  return impl_->dispatcher->resolve(problem);
}

Backend Runtime::backend() const { return impl_->options.backend; }
const std::string& Runtime::device_key() const { return impl_->device_key; }
const ArchLimits& Runtime::arch() const { return impl_->arch; }
int Runtime::sm_count() const { return impl_->sm_count; }
std::string Runtime::device_name() const { return impl_->device_name; }

}  // namespace attune
