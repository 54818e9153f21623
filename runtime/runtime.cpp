#include "runtime/runtime.h"

#include <map>
#include <mutex>
#include <type_traits>

#include "core/error.h"
#include "emulator/bounds_report.h"
#include "generated/kernel_shapes.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/launch/cuda_backend.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/kv_append_params.h"
#include "runtime/launch/merge_states_params.h"
#include "runtime/launch/ops.h"

namespace attune {

std::string_view to_string(Backend backend) { return backend == Backend::kCuda ? "cuda" : "emu"; }

std::string bounds_report() {
  std::string gpu = cuda::bounds_report();
  std::string emulated = emu::bounds_report();
  if (!gpu.empty() && !emulated.empty()) return "on the GPU, " + gpu + "; on the emulator, " + emulated;
  return gpu.empty() ? emulated : gpu;
}

void clear_bounds_report() {
  cuda::clear_bounds_report();
  emu::clear_bounds_report();
}

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "cuda") return Backend::kCuda;
  if (name == "emu") return Backend::kEmu;
  return std::nullopt;
}

struct Plan::State {
  const void* owner = nullptr;  // the Runtime::Impl that made it
  Op op = Op::kForward;
  AttentionProblem problem;  // with device lengths when it has length arrays
  Variant variant;
  std::string reason;
  ForwardKernels forward;
  DecodeKernels decode;
  BackwardKernels backward;
  std::size_t workspace_bytes = 0;
};

const Plan::State& Plan::state() const {
  if (state_ == nullptr) throw InvalidArgument("plan: empty; expected one made by Runtime::plan");
  return *state_;
}
Op Plan::op() const { return state().op; }
const AttentionProblem& Plan::problem() const { return state().problem; }
const Variant& Plan::variant() const { return state().variant; }
int Plan::splits() const { return state().op == Op::kDecode ? state().decode.splits : 1; }
std::size_t Plan::workspace_bytes() const { return state().workspace_bytes; }
const std::string& Plan::reason() const { return state().reason; }

std::string Plan::describe() const {
  const State& s = state();
  std::string out = std::string(to_string(s.op)) + " " + s.variant.id();
  if (s.op == Op::kDecode) {
    out += ", " + std::to_string(s.decode.splits) + " splits";
    if (s.decode.split_tiles > 0) {
      out += " of " + std::to_string(s.decode.split_tiles * FlashDecodeShape::of(s.variant).block_n) + " keys";
    }
  }
  out += ", workspace " + std::to_string(s.workspace_bytes) + " bytes";
  if (!s.reason.empty()) out += " (" + s.reason + ")";
  return out;
}

namespace {

// The pointer a run needs and did not get.
void require_array(const std::int32_t* data, bool used, const char* name, const std::string& expected) {
  if (used && data == nullptr) {
    throw InvalidArgument(std::string("metadata ") + name + ": got null; expected " + expected +
                          " in the backend's memory (the plan reads it)");
  }
}

// The problem a run launches over: the plan's, or the same with fewer
// sequences. `storage` holds the copy when one is needed.
const AttentionProblem& run_problem(const Plan::State& s, const DeviceMetadata& m, AttentionProblem& storage) {
  const AttentionProblem& p = s.problem;
  if (m.batch == -1 || m.batch == p.batch) return p;
  if (m.batch < 0 || m.batch > p.batch) {
    throw InvalidArgument("run batch: got " + std::to_string(m.batch) + " sequences; expected 0.." +
                          std::to_string(p.batch) + " (the plan's batch), or -1 for the plan's");
  }
  storage = p;
  storage.batch = m.batch;
  return storage;
}

}  // namespace

// Restores the caller's CUDA context when a call returns (cuda backend).
class CallScope {
 public:
  explicit CallScope(Backend backend) {
    if (backend == Backend::kCuda) scope_.emplace(cuda::Driver::get());
  }

 private:
  std::optional<cuda::Driver::ContextScope> scope_;
};

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

  bool cuda() const { return options.backend == Backend::kCuda; }

  // Plans `variant` for a validated problem in device-lengths form.
  Plan make_plan(Op op, const Variant& variant, const AttentionProblem& problem, PlanOptions o, std::string reason,
                 Compile compile) {
    check_usable();
    if (!cuda()) {
      check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                         emulator_limits());
    }
    auto s = std::make_shared<Plan::State>();
    s->owner = this;
    s->op = op;
    s->problem = problem;
    s->variant = variant;
    s->reason = std::move(reason);
    switch (op) {
      case Op::kForward:
        s->forward = load_forward(*backend, variant, problem.compute_dtype(), compile);
        s->workspace_bytes = forward_workspace_bytes(problem, s->forward);
        break;
      case Op::kDecode: {
        DecodeSplit split{o.splits, 0};
        if (o.split_size != 0) {
          if (o.splits != 0) {
            throw InvalidArgument("split size " + std::to_string(o.split_size) + " and " + std::to_string(o.splits) +
                                  " splits: expected one of the two");
          }
          split = fixed_split(problem, variant, o.split_size);
        }
        s->decode = load_decode(*backend, variant, split.splits, problem.compute_dtype(), compile, split.split_tiles);
        s->workspace_bytes = decode_workspace_bytes(problem, s->decode);
        break;
      }
      case Op::kBackward:
        validate_backward(problem);
        s->backward = load_backward(*backend, variant, problem.compute_dtype(), problem.modifiers.sinks, compile);
        s->workspace_bytes = backward_workspace_bytes(problem, s->backward);
        break;
    }
    return Plan(std::move(s));
  }

  // What every run checks before launching anything.
  const Plan::State& check_run(const Plan& plan, Op op, const DeviceMetadata& m, Workspace w) const {
    const Plan::State& s = plan.state();
    if (s.owner != this) throw InvalidArgument("plan: made by another runtime; expected one of this runtime's");
    if ((op == Op::kBackward) != (s.op == Op::kBackward)) {
      throw InvalidArgument(std::string("plan: a ") + std::string(to_string(s.op)) + " plan run with " +
                            (op == Op::kBackward ? "run_backward" : "run") + "; expected " +
                            (s.op == Op::kBackward ? "run_backward (BackwardBuffers)" : "run (AttentionBuffers)"));
    }
    const AttentionProblem& p = s.problem;
    require_array(m.cu_seqlens_q, p.is_packed(), "cu_seqlens_q", "int32 [B+1] query offsets");
    require_array(m.cu_seqlens_k, p.has_packed_keys(), "cu_seqlens_k", "int32 [B+1] key offsets");
    require_array(m.seqlens_k, p.has_seqlens_k(), "seqlens_k", "int32 [B] key counts");
    require_array(m.block_table, p.is_paged(), "block_table", "int32 [B, max_pages] page indices");
    if (s.workspace_bytes > 0) {
      if (w.data == nullptr || w.bytes < s.workspace_bytes) {
        throw InvalidArgument("workspace: got " + std::to_string(w.data == nullptr ? 0 : w.bytes) + " bytes" +
                              (w.data == nullptr ? " (null)" : "") + "; expected at least " +
                              std::to_string(s.workspace_bytes) + " bytes (Plan::workspace_bytes)");
      }
      if (reinterpret_cast<std::uintptr_t>(w.data) % 16 != 0) {
        throw InvalidArgument("workspace: not 16-byte aligned; expected a 16-byte aligned pointer");
      }
    }
    check_usable();
    return s;
  }

  // `buffers_validated`: the call's entry validated the problem with these
  // buffers already (the convenience calls), so they are not checked again.
  template <class Buffers>
  void run(const Plan& plan, Op op, const Buffers& buffers, const DeviceMetadata& m, Workspace w, void* stream,
           bool buffers_validated = false) {
    const Plan::State& s = check_run(plan, op, m, w);
    AttentionProblem storage;
    const AttentionProblem& p = run_problem(s, m, storage);
    if (!buffers_validated) validate_buffers(p, buffers);
    if (!cuda()) check_modifier_values(p, {buffers.sinks, buffers.alibi_slopes});  // host memory
    void* workspace = s.workspace_bytes > 0 ? w.data : nullptr;
    const std::unique_ptr<LaunchBackend::Call> call = backend->begin(stream);
    if constexpr (std::is_same_v<Buffers, BackwardBuffers>) {
      launch_backward(*call, p, s.backward, buffers, m, static_cast<float*>(workspace));
    } else if (s.op == Op::kDecode) {
      launch_decode(*call, p, s.decode, buffers, m, static_cast<float*>(workspace));
    } else {
      launch_forward(*call, p, s.forward, buffers, m, workspace);
    }
  }

  // Plan + run for host length arrays (the convenience calls, whose entry
  // validated the problem with its buffers). Inside a CUDA graph capture
  // only what needs no compile, copy or allocation runs.
  template <class Buffers>
  void call(Op op, const Variant& variant, const AttentionProblem& problem, const Buffers& buffers, PlanOptions o,
            std::string reason, void* stream) {
    const AttentionProblem device = device_lengths_of(problem);
    const bool capturing = cuda() && cuda::Driver::get().is_capturing(stream);
    const Plan plan =
        make_plan(op, variant, device, o, std::move(reason), capturing ? Compile::kRefused : Compile::kAllowed);
    if (capturing && (device.device_lengths || plan.workspace_bytes() > 0)) {
      throw InvalidArgument(
          "the stream is capturing a CUDA graph, and this call copies its host lengths or allocates its "
          "workspace; expected a plan (Runtime::plan, attune_plan_create) run with device metadata and a "
          "workspace");
    }
    CallMemory memory(*backend, problem, plan.workspace_bytes(), stream);
    run(plan, op, buffers, memory.metadata(), {memory.workspace(), plan.workspace_bytes()}, stream,
        /*buffers_validated=*/true);
    memory.finish();
  }

  // Runtime::decode after its validation (also the paged forward's way
  // for few query rows, validated by Runtime::forward).
  void decode_validated(const AttentionProblem& problem, const AttentionBuffers& buffers, DecodeOptions o,
                        void* stream) {
    check_decode_features(problem);
    if (o.splits != 0) check_splits(o.splits);
    const CallScope scope(options.backend);
    const DispatchChoice& choice = dispatcher->choose(Op::kDecode, problem);
    call(Op::kDecode, with_problem_features(choice.variant, problem), problem, buffers,
         {.splits = o.splits != 0 ? o.splits : choice.splits}, {}, stream);
  }

  // A variant asked for by name must fit this device's limits.
  void check_fits(const Variant& variant, const AttentionProblem& problem) const {
    check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v), arch);
  }

  // The *_variant calls: the problem with its buffers validated, then the
  // variant asked for by name, which must fit this device's limits.
  template <class Buffers>
  void call_variant(Op op, const Variant& variant, const AttentionProblem& problem, const Buffers& buffers,
                    PlanOptions o, void* stream) {
    validate(problem, buffers);
    check_fits(variant, problem);
    const CallScope scope(options.backend);
    call(op, variant, problem, buffers, o, {}, stream);
  }

  // The kernel of a one-kernel call (merge_states, append_kv), compiled on
  // its first call unless `stream` is capturing. Only a kernel still to
  // compile asks whether the stream is capturing: a repeated call launches
  // and makes no other driver call.
  LoadedKernel load_single(const Variant& variant, DType dtype, void* stream) {
    check_usable();
    const bool capturing = cuda() && !backend->loaded(variant, dtype) && cuda::Driver::get().is_capturing(stream);
    return backend->load(variant, dtype, capturing ? Compile::kRefused : Compile::kAllowed);
  }

  // After a sticky CUDA error every call fails at once with its message,
  // before compiling anything.
  void check_usable() const {
    if (cuda()) cuda::Driver::get().check_usable();
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
    s.backend = std::make_unique<CudaBackend>(driver, s.options.device, s.arch.name, s.sm_count, *s.compiler);
  } else {
    s.device_key = kEmulatorDeviceKey;
    s.device_name = "attune emulator (CPU)";
    s.arch = require_arch(kEmulatedArch);
    s.backend = std::make_unique<EmuBackend>();
    s.sm_count = s.backend->sm_count();
  }
  s.dispatcher = std::make_unique<Dispatcher>(s.device_key, s.arch, s.options.tuned, s.sm_count);
}

Runtime::~Runtime() = default;

namespace {

std::string reason_of(const DispatchChoice& choice) {
  return std::string(to_string(choice.rule)) + ": " + choice.detail;
}

Op op_of(const Variant& variant) {
  if (variant.kernel == nullptr)
    throw InvalidArgument("variant: none; expected a flash_fwd, flash_decode or flash_bwd variant");
  switch (variant.kernel->id) {
    case KernelId::kFlashFwd:
    case KernelId::kFlashFwdSm90:
      return Op::kForward;
    case KernelId::kFlashDecode:
      return Op::kDecode;
    case KernelId::kFlashBwd:
    case KernelId::kFlashBwdSm90:
      return Op::kBackward;
    default:
      throw InvalidArgument("variant " + variant.id() + ": expected a flash_fwd, flash_decode or flash_bwd variant");
  }
}

}  // namespace

DispatchChoice Runtime::explain(const AttentionProblem& problem) const {
  validate(problem);
  const Op op = paged_forward_op(problem);
  DispatchChoice choice = impl_->dispatcher->resolve(op, problem);
  choice.variant = with_problem_features(choice.variant, problem);
  if (problem.is_paged()) {
    choice.detail += "; a paged cache with " + std::string(op == Op::kDecode ? "fewer than " : "at least ") +
                     std::to_string(kPagedForwardRows) + " query rows per sequence runs " +
                     (op == Op::kDecode ? "the decode kernel" : "the forward kernel");
  }
  return choice;
}

DecodeChoice Runtime::explain_decode(const AttentionProblem& problem, DecodeOptions options) const {
  validate(problem);
  const DispatchChoice dispatched = impl_->dispatcher->resolve(Op::kDecode, problem);
  DecodeChoice choice{with_problem_features(dispatched.variant, problem), dispatched.splits, reason_of(dispatched)};
  if (options.splits != 0) {
    check_splits(options.splits);
    choice.splits = options.splits;
    choice.reason += "; " + std::to_string(options.splits) + " splits as asked";
  }
  return choice;
}

DispatchChoice Runtime::explain_backward(const AttentionProblem& problem, BackwardOptions options) const {
  validate(problem);
  DispatchChoice choice = impl_->dispatcher->resolve(Op::kBackward, problem);
  if (options.deterministic && backward_dq_atomic(choice.variant) != 0) {
    if (const std::optional<Variant> twin = backward_dq_twin(choice.variant, 0)) {
      choice.variant = *twin;
      choice.detail += "; its deterministic twin (dQ summed in a fixed order)";
    } else {
      choice.variant = heuristic_backward_variant(problem.compute_dtype(), static_cast<int>(problem.head_dim_k),
                                                  static_cast<int>(problem.head_dim_v), impl_->arch, true,
                                                  modifier_bits(problem.modifiers));
      choice.rule = DispatchRule::kHeuristic;
      choice.detail = "deterministic mode: the heuristic's deterministic variant";
    }
  }
  return choice;
}

Plan Runtime::plan(const AttentionProblem& problem, Op op, PlanOptions options) {
  const CallScope scope(impl_->options.backend);
  validate(problem);
  // A paged cache: the forward kernel for long query chunks, else decode
  // (which a split count asks for too).
  if (op == Op::kForward && problem.is_paged() &&
      (paged_forward_op(problem) == Op::kDecode || options.splits != 0 || options.split_size != 0)) {
    op = Op::kDecode;
  }
  if (op == Op::kDecode) check_decode_features(problem);
  const AttentionProblem device = device_lengths_of(problem);
  Variant variant;
  std::string reason;
  if (op == Op::kBackward) {
    validate_backward(device);
    const DispatchChoice choice = options.deterministic ? explain_backward(device, {.deterministic = true})
                                                        : impl_->dispatcher->choose(Op::kBackward, device);
    variant = choice.variant;
    reason = reason_of(choice);
  } else {
    const DispatchChoice& choice = impl_->dispatcher->choose(op, device);
    variant = with_problem_features(choice.variant, device);  // a paged cache: the tiles, reading pages
    reason = reason_of(choice);
    if (op == Op::kDecode && options.splits == 0 && options.split_size == 0) options.splits = choice.splits;
  }
  return impl_->make_plan(op, variant, device, options, std::move(reason), Compile::kAllowed);
}

Plan Runtime::plan_variant(const Variant& variant, const AttentionProblem& problem, PlanOptions options) {
  const CallScope scope(impl_->options.backend);
  validate(problem);
  const Op op = op_of(variant);
  impl_->check_fits(variant, problem);
  if (op == Op::kDecode && options.splits == 0 && options.split_size == 0) options.splits = 1;
  return impl_->make_plan(op, variant, device_lengths_of(problem), options, "as asked", Compile::kAllowed);
}

void Runtime::run(const Plan& plan, const AttentionBuffers& buffers, const DeviceMetadata& metadata,
                  Workspace workspace, void* stream) {
  const CallScope scope(impl_->options.backend);
  impl_->run(plan, Op::kForward, buffers, metadata, workspace, stream);
}

void Runtime::run_backward(const Plan& plan, const BackwardBuffers& buffers, const DeviceMetadata& metadata,
                           Workspace workspace, void* stream) {
  const CallScope scope(impl_->options.backend);
  impl_->run(plan, Op::kBackward, buffers, metadata, workspace, stream);
}

void Runtime::merge_states(const MergeProblem& problem, std::span<const void* const> o,
                           std::span<const float* const> lse, void* out_o, float* out_lse, void* stream) {
  validate(problem, o, lse, out_o);
  const CallScope scope(impl_->options.backend);
  const LoadedKernel kernel = impl_->load_single(merge_states_variant(), problem.dtype, stream);
  launch_merge(*impl_->backend->begin(stream), problem, kernel, o, lse, out_o, out_lse);
}

void Runtime::append_kv(const AppendProblem& problem, const AppendBuffers& buffers, void* stream) {
  validate(problem, buffers);
  const CallScope scope(impl_->options.backend);
  const LoadedKernel kernel = impl_->load_single(kv_append_variant(), problem.dtype, stream);
  launch_append(*impl_->backend->begin(stream), problem, kernel, buffers);
}

void Runtime::forward(const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream) {
  validate(problem, buffers);
  if (paged_forward_op(problem) == Op::kDecode) {
    impl_->decode_validated(problem, buffers, {}, stream);  // few query rows over a paged cache
    return;
  }
  const CallScope scope(impl_->options.backend);
  const DispatchChoice& choice = impl_->dispatcher->choose(Op::kForward, problem);
  impl_->call(Op::kForward, with_problem_features(choice.variant, problem), problem, buffers, {}, {}, stream);
}

void Runtime::forward_variant(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                              void* stream) {
  impl_->call_variant(Op::kForward, variant, problem, buffers, {}, stream);
}

void Runtime::decode(const AttentionProblem& problem, const AttentionBuffers& buffers, DecodeOptions options,
                     void* stream) {
  validate(problem, buffers);
  impl_->decode_validated(problem, buffers, options, stream);
}

void Runtime::decode_variant(const Variant& variant, int splits, const AttentionProblem& problem,
                             const AttentionBuffers& buffers, void* stream) {
  impl_->call_variant(Op::kDecode, variant, problem, buffers, {.splits = splits}, stream);
}

void Runtime::backward(const AttentionProblem& problem, const BackwardBuffers& buffers, BackwardOptions options,
                       void* stream) {
  validate(problem, buffers);
  const CallScope scope(impl_->options.backend);
  const Variant variant = options.deterministic ? explain_backward(problem, options).variant
                                                : impl_->dispatcher->choose(Op::kBackward, problem).variant;
  impl_->call(Op::kBackward, variant, problem, buffers, {}, {}, stream);
}

void Runtime::backward_variant(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                               void* stream) {
  impl_->call_variant(Op::kBackward, variant, problem, buffers, {}, stream);
}

Backend Runtime::backend() const { return impl_->options.backend; }
const std::string& Runtime::device_key() const { return impl_->device_key; }
const ArchLimits& Runtime::arch() const { return impl_->arch; }
int Runtime::sm_count() const { return impl_->sm_count; }
std::string Runtime::device_name() const { return impl_->device_name; }

}  // namespace attune
