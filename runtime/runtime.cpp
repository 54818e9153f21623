#include "runtime/runtime.h"

#include <map>
#include <mutex>

#include "core/error.h"
#include "generated/kernel_shapes.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/launch/cuda_backend.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/ops.h"

namespace attune {

std::string_view to_string(Backend backend) { return backend == Backend::kCuda ? "cuda" : "emu"; }

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "cuda") return Backend::kCuda;
  if (name == "emu") return Backend::kEmu;
  return std::nullopt;
}

struct Runtime::Impl {
  RuntimeOptions options;
  std::string device_key;
  std::string device_name;
  ArchLimits arch;
  std::unique_ptr<KernelCache> cache;
  std::unique_ptr<CompilerService> compiler;
  std::unique_ptr<LaunchBackend> backend;
  std::unique_ptr<Dispatcher> dispatcher;
  int sm_count = 0;  // what the split heuristic fills

  void forward(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream) {
    check_usable();
    if (options.backend == Backend::kEmu) check_emulated(variant, problem, buffers.sinks, buffers.alibi_slopes);
    const ForwardKernels kernels = load_forward(*backend, variant, problem.dtype);
    CallMemory memory(*backend, problem, 0, stream);
    launch_forward(*backend->begin(stream), problem, kernels, buffers, memory.metadata());
    memory.finish();
  }

  void decode(const Variant& variant, int splits, const AttentionProblem& problem, const AttentionBuffers& buffers,
              void* stream) {
    check_usable();
    if (options.backend == Backend::kEmu) check_emulated(variant, problem, buffers.sinks, buffers.alibi_slopes);
    const DecodeKernels kernels = load_decode(*backend, variant, splits, problem.dtype);
    CallMemory memory(*backend, problem, decode_workspace_bytes(problem, kernels), stream);
    launch_decode(*backend->begin(stream), problem, kernels, buffers, memory.metadata(), memory.workspace());
    memory.finish();
  }

  void backward(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers, void* stream) {
    check_usable();
    if (options.backend == Backend::kEmu) check_emulated(variant, problem, buffers.sinks, buffers.alibi_slopes);
    const BackwardKernels kernels = load_backward(*backend, variant, problem.dtype, problem.modifiers.sinks);
    CallMemory memory(*backend, problem, backward_workspace_bytes(problem, kernels), stream);
    launch_backward(*backend->begin(stream), problem, kernels, buffers, memory.metadata(), memory.workspace());
    memory.finish();
  }

  // After a sticky CUDA error every call fails at once with its message,
  // before compiling anything.
  void check_usable() const {
    if (options.backend == Backend::kCuda) cuda::Driver::get().check_usable();
  }

  // The emulator also checks against its own limits (more shared memory).
  // Its buffers are host memory, so the modifiers' values are checked too.
  static void check_emulated(const Variant& variant, const AttentionProblem& problem, const float* sinks,
                             const float* alibi_slopes) {
    check_modifier_values(problem, {sinks, alibi_slopes});
    check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                       emulator_limits());
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  if (s.options.backend == Backend::kCuda) {
    cuda::Driver& driver = cuda::Driver::get();
    const std::vector<cuda::DeviceInfo> devices = driver.devices();
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
    s.backend = std::make_unique<CudaBackend>(driver, s.options.device, s.arch.name, *s.compiler);
  } else {
    s.device_key = kEmulatorDeviceKey;
    s.device_name = "attune emulator (CPU)";
    s.arch = require_arch(kEmulatedArch);
    s.sm_count = kEmulatedSmCount;
    s.backend = std::make_unique<EmuBackend>();
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
  impl_->forward(impl_->dispatcher->choose(problem).variant, problem, buffers, stream);
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
  impl_->decode(choice.variant, options.splits != 0 ? options.splits : choice.splits, problem, buffers, stream);
}

namespace {

// The deterministic twin of a flash_bwd variant: the same tiles with dQ
// summed per key block (kDqAtomic = 0); nullopt when no such variant is valid.
std::optional<Variant> deterministic_twin(const Variant& v) {
  FlashBwdShape shape = FlashBwdShape::of(v);
  shape.dq_atomic = 0;
  Variant twin{v.kernel, shape.values(), v.modifiers};
  if (!v.kernel->valid(twin.values)) return std::nullopt;
  return twin;
}

}  // namespace

DispatchChoice Runtime::explain_backward(const AttentionProblem& problem, BackwardOptions options) const {
  validate(problem);
  DispatchChoice choice = impl_->dispatcher->resolve(Op::kBackward, problem);
  if (options.deterministic && FlashBwdShape::of(choice.variant).dq_atomic != 0) {
    if (const std::optional<Variant> twin = deterministic_twin(choice.variant)) {
      choice.variant = *twin;
      choice.detail += "; its deterministic twin (dQ summed per key block)";
    } else {
      choice.variant = heuristic_backward_variant(problem.dtype, static_cast<int>(problem.head_dim_k),
                                                  static_cast<int>(problem.head_dim_v), impl_->arch, true,
                                                  modifier_bits(problem.modifiers));
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
  impl_->backward(variant, problem, buffers, stream);
}

void Runtime::backward_variant(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                               void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->backward(variant, problem, buffers, stream);
}

void Runtime::decode_variant(const Variant& variant, int splits, const AttentionProblem& problem,
                             const AttentionBuffers& buffers, void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->decode(variant, splits, problem, buffers, stream);
}

void Runtime::forward_variant(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                              void* stream) {
  validate(problem, buffers);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), impl_->arch);
  impl_->forward(variant, problem, buffers, stream);
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
