#include "runtime/launch/emu_backend.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/env.h"
#include "core/error.h"
#include "emulator/emulator.h"
#include "runtime/launch/ops.h"

namespace attune {

namespace {

// One call: a fresh emulator, so each call's detectors see only its buffers.
class EmuCall final : public LaunchBackend::Call {
 public:
  EmuCall(emu::LaunchCounters& totals, TensorMapCache& maps)
      : emulator_(emu::Emulator::Options{.schedule_seed = emulated_schedule_seed()}), totals_(totals), maps_(maps) {}
  ~EmuCall() override { totals_.add(emulator_.counters()); }
  EmuCall(const EmuCall&) = delete;
  EmuCall& operator=(const EmuCall&) = delete;
  void buffer(const char* name, const void* data, std::size_t bytes) override {
    emulator_.register_buffer(name, data, bytes);
  }
  void launch(const LoadedKernel& kernel, const LaunchConfig& config, const void* params,
              std::size_t /*params_size*/) override {
    if (!kernel.variant.kernel->launch_on_emulator(kernel.dtype, kernel.variant.values, emulator_, config, params)) {
      throw InvalidArgument("variant " + kernel.variant.id() + ": not instantiated for the emulator");
    }
  }
  TensorMap tensor_map(const TensorMapSpec& spec) override { return maps_.get(spec, encode_emulated_tensor_map); }
  void zero(void* data, std::size_t words) override { std::memset(data, 0, words * sizeof(std::uint32_t)); }

 private:
  emu::Emulator emulator_;
  emu::LaunchCounters& totals_;
  TensorMapCache& maps_;
};

}  // namespace

int emulated_sm_count() {
  constexpr int kDefault = 132;  // an H100 SXM's (runtime.h: kEmulatedSmCount)
  return static_cast<int>(env_integer("ATTUNE_EMU_SMS", 1, 1024, kDefault, "the emulated SM count, 1 to 1024"));
}

std::uint64_t emulated_schedule_seed() {
  return env_integer("ATTUNE_EMU_SEED", 0, std::numeric_limits<std::uint64_t>::max(), 0,
                     "a scheduling seed, an integer >= 0 (0: grid and thread order)");
}

const ArchLimits& emulator_limits() {
  static const ArchLimits kLimits{.name = "the emulator", .max_shared_bytes = 256 * 1024, .every_arch = true};
  return kLimits;
}

LoadedKernel EmuBackend::load(const Variant& variant, DType dtype, Compile /*compile*/) {  // nothing to compile
  if (variant.kernel == nullptr || !variant.kernel->valid(variant.values)) {
    throw InvalidArgument("variant " + (variant.kernel == nullptr ? std::string("(none)") : variant.id()) +
                          ": not a valid variant");
  }
  if (variant.shared_bytes() > emulator_limits().max_shared_bytes) {
    throw InvalidArgument("variant " + variant.id() + ": needs " + std::to_string(variant.shared_bytes()) +
                          " bytes of shared memory; the emulator allows " +
                          std::to_string(emulator_limits().max_shared_bytes));
  }
  return {variant, dtype, nullptr};
}

std::unique_ptr<LaunchBackend::Call> EmuBackend::begin(void* /*stream*/) {
  return std::make_unique<EmuCall>(counters_, tensor_maps_);
}

void* EmuBackend::allocate(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0xFF, bytes);  // NaN in every float: unwritten slots show
  return p;
}

void EmuBackend::release(void* pointer) { std::free(pointer); }

void EmuBackend::copy_to_device(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

namespace {

// Runs one call of an operation on a fresh emulator backend.
template <class Load, class Workspace, class Launch>
void emulate(const AttentionProblem& problem, const Load& load, const Workspace& workspace, const Launch& launch,
             emu::LaunchCounters* counters) {
  EmuBackend backend;
  const auto kernels = load(backend);
  CallMemory memory(backend, problem, workspace(kernels), nullptr);
  {
    const std::unique_ptr<LaunchBackend::Call> call = backend.begin(nullptr);
    launch(*call, kernels, memory);
  }  // the call's counters reach the backend when it ends
  memory.finish();
  if (counters != nullptr) counters->add(backend.counters());
}

// What every emulate_* call checks first: the problem with its buffers and
// the modifiers' values, the kernel, and the emulator's limits.
template <class Buffers>
void check_runs(const Variant& variant, KernelId kernel, const AttentionProblem& problem, const Buffers& buffers) {
  validate(problem, buffers);
  check_modifier_values(problem, {buffers.sinks, buffers.alibi_slopes});
  // The forward and the backward have two families: the portable one named, and Hopper's.
  const KernelId hopper = kernel == KernelId::kFlashFwd   ? KernelId::kFlashFwdSm90
                          : kernel == KernelId::kFlashBwd ? KernelId::kFlashBwdSm90
                                                          : kernel;
  if (variant.kernel == nullptr || variant.kernel->id != hopper) require_kernel(variant, kernel);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                     emulator_limits());
}

}  // namespace

void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                     emu::LaunchCounters* counters) {
  check_runs(variant, KernelId::kFlashFwd, problem, buffers);
  emulate(
      problem, [&](LaunchBackend& b) { return load_forward(b, variant, problem.compute_dtype()); },
      [&](const ForwardKernels& k) { return forward_workspace_bytes(problem, k); },
      [&](LaunchBackend::Call& call, const ForwardKernels& k, const CallMemory& m) {
        launch_forward(call, problem, k, buffers, m.metadata(), m.workspace());
      },
      counters);
}

void emulate_decode(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                    int splits, emu::LaunchCounters* counters) {
  check_runs(variant, KernelId::kFlashDecode, problem, buffers);
  emulate(
      problem, [&](LaunchBackend& b) { return load_decode(b, variant, splits, problem.compute_dtype()); },
      [&](const DecodeKernels& k) { return decode_workspace_bytes(problem, k); },
      [&](LaunchBackend::Call& call, const DecodeKernels& k, const CallMemory& m) {
        launch_decode(call, problem, k, buffers, m.metadata(), m.workspace());
      },
      counters);
}

void emulate_backward(const AttentionProblem& problem, const BackwardBuffers& buffers, const Variant& variant,
                      emu::LaunchCounters* counters) {
  check_runs(variant, KernelId::kFlashBwd, problem, buffers);
  emulate(
      problem,
      [&](LaunchBackend& b) { return load_backward(b, variant, problem.compute_dtype(), problem.modifiers.sinks); },
      [&](const BackwardKernels& k) { return backward_workspace_bytes(problem, k); },
      [&](LaunchBackend::Call& call, const BackwardKernels& k, const CallMemory& m) {
        launch_backward(call, problem, k, buffers, m.metadata(), m.workspace());
      },
      counters);
}

}  // namespace attune
