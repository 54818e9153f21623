// attune::Runtime: picks the variant for a problem on the device in hand,
// compiles it once with NVRTC (through the kernel cache), and launches it.
//
// Example (CUDA; pointers are device memory, `stream` a CUstream or null):
//   attune::Runtime runtime({.backend = attune::Backend::kCuda});
//   attune::AttentionProblem problem = attune::make_problem(q_shape, k_shape, v_shape,
//       {.dtype = attune::DType::kBF16, .mask = attune::Mask::causal_bottom_right()});
//   runtime.forward(problem, {q, k, v, o, lse}, stream);
// The same with Backend::kEmu runs on the CPU emulator over host pointers.
//
// Serving engines plan once per batch shape and run each step (plan.h):
//   const attune::Plan plan = runtime.plan(problem, attune::Op::kDecode);
//   runtime.run(plan, buffers, metadata, workspace, stream);   // launches only
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/append_problem.h"
#include "core/problem.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/plan.h"

namespace attune {

enum class Backend : std::uint8_t { kCuda, kEmu };
std::string_view to_string(Backend backend);  // "cuda", "emu"
std::optional<Backend> parse_backend(std::string_view name);

// Lengths and block tables read from device memory (plans with device
// lengths, graph replays) cannot be checked on the host: a kernel given a
// length past its block-table row (or Sk), or a page outside the pool,
// clamps it (it never reads outside the pool or the table) and reports the
// first such event here, GPU kernels and the emulator alike. One line
// ("" when none since the last clear); a report means some run's output is
// wrong. Host memory only: after the runs are complete, no sync needed.
//
//   runtime.run(plan, buffers, metadata, workspace, stream);   // ... many steps
//   if (const std::string why = attune::bounds_report(); !why.empty()) { ... }
std::string bounds_report();
// Clears it: the next event is reported again.
void clear_bounds_report();

// The emulator's device key: its timings and tuned results never mix with a GPU's.
inline constexpr const char* kEmulatorDeviceKey = "attune-emulator/cpu";
// The architecture whose limits and heuristic the emulator backend follows.
inline constexpr const char* kEmulatedArch = "sm_90a";
// The SM count the emulator's split heuristic fills (an H100/H200-class GPU).
inline constexpr int kEmulatedSmCount = 132;

struct DecodeOptions {
  int splits = 0;  // CTAs along the keys; 0: the built-in choice
};

struct BackwardOptions {
  // dQ summed per key block in a fixed order instead of by atomics:
  // bitwise-identical gradients across runs, for a workspace of
  // key blocks x rows x Hq x Dk floats.
  bool deterministic = false;
};

struct DecodeChoice {
  Variant variant;
  int splits = 1;
  std::string reason;
};

struct RuntimeOptions {
  Backend backend = Backend::kCuda;
  int device = 0;                         // CUDA device ordinal
  std::filesystem::path cache_directory;  // empty: KernelCache::default_directory()
  const TunedSource* tuned = nullptr;     // tuned results; may be null; must outlive the runtime
  unsigned compile_threads = 0;           // 0: one per core
};

class Runtime {
 public:
  // Throws cuda::DriverUnavailable (one line) when the cuda backend has no
  // driver, CacheError when the cache directory is unsafe.
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Plans one operation on `problem` (plan.h): validates it, dispatches
  // (memo, tuned, nearest, heuristic), fixes the split count, compiles and
  // loads every kernel the call needs and sizes its workspace. A problem
  // with host length arrays plans for their bounds (device_lengths_of): its
  // runs then pass the arrays in device memory. Op::kForward of a paged
  // cache plans the forward kernel when a sequence may bring
  // kPagedForwardRows query rows or more (chunked prefill), else the decode
  // kernel, as it does when options ask for splits (heuristics.h). Throws
  // InvalidArgument, or what compiling throws.
  Plan plan(const AttentionProblem& problem, Op op = Op::kForward, PlanOptions options = {});
  // The same with a given variant (its kernel names the op).
  Plan plan_variant(const Variant& variant, const AttentionProblem& problem, PlanOptions options = {});

  // Runs a plan: launches its kernels on `stream` and nothing else (no
  // allocation, copy, synchronization or compile; CUDA-graph safe). The
  // metadata arrays the plan's LengthBounds name must be set (backend
  // memory), `workspace` must hold plan.workspace_bytes(), and
  // metadata.batch may be at most the plan's B. Each failure is an
  // InvalidArgument saying what was wrong and what was expected, with
  // nothing launched. A backward plan runs with run_backward.
  void run(const Plan& plan, const AttentionBuffers& buffers, const DeviceMetadata& metadata = {},
           Workspace workspace = {}, void* stream = nullptr);
  void run_backward(const Plan& plan, const BackwardBuffers& buffers, const DeviceMetadata& metadata = {},
                    Workspace workspace = {}, void* stream = nullptr);

  // Merges partial results over disjoint keys (MergeProblem, core/problem.h:
  // cascade or shared-prefix attention, context parallelism): one launch on
  // `stream`, nothing allocated or copied; partials with LSE = -inf are
  // skipped. out_lse may be null. The kernel is compiled on the first call
  // (never while `stream` is capturing). InvalidArgument for bad sizes or
  // pointers, with nothing launched.
  void merge_states(const MergeProblem& problem, std::span<const void* const> o, std::span<const float* const> lse,
                    void* out_o, float* out_lse, void* stream = nullptr);

  // Appends a step's new keys and values to a KV cache, rotating them and Q
  // when the problem has a rotary table (AppendProblem,
  // core/append_problem.h): one launch on `stream`, nothing allocated or
  // copied, then attention runs over buffers.q_rot (or Q) with
  // buffers.seqlens_out as the cache lengths. A length in device memory
  // that puts a key past its row writes nothing there and is reported
  // (bounds_report), as the attention reports it. Compiles on the first
  // call (never while `stream` is capturing). InvalidArgument for bad sizes
  // or pointers, with nothing launched.
  void append_kv(const AppendProblem& problem, const AppendBuffers& buffers, void* stream = nullptr);

  // The calls below are plan + run in one, for host length arrays: they
  // plan (a memo hit after the first call), copy the arrays to the device
  // and allocate the workspace, run, then synchronize the stream and free
  // what they allocated. A dense problem without modifiers' workspace costs
  // its launches only; a varlen, padded or paged one or a split decode
  // costs its allocations, copies and one synchronization per call, and
  // refuses to run while `stream` is capturing a CUDA graph (plan first).

  // Forward attention: O (and LSE when set). Validates the problem and the
  // buffers (InvalidArgument), compiles on first use, launches on `stream`
  // (cuda; ignored by emu). After a sticky CUDA error (illegal address,
  // launch failure) every later call throws that cuda::CudaError again at
  // once, compiling and launching nothing: the context is lost until the
  // process restarts. The caller's current CUDA context is restored when
  // any call returns. Thread-safe.
  void forward(const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream = nullptr);

  // The same with a given variant instead of the dispatcher's choice (the
  // tuner, `attune attention --variant`). Throws InvalidArgument when the
  // variant cannot run the problem on this device.
  void forward_variant(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                       void* stream = nullptr);

  // What forward would run, and the rule that chose it (for a paged cache
  // with few query rows, the decode variant and its splits).
  DispatchChoice explain(const AttentionProblem& problem) const;

  // Split-KV decode (few query rows against a long, contiguous or paged KV
  // cache): the keys are split across CTAs and their partial states merged.
  // `options.splits` 0 lets the built-in heuristic fill the GPU in whole
  // waves. Same validation and stream rules as forward; forward() of a paged
  // problem with few query rows comes here.
  void decode(const AttentionProblem& problem, const AttentionBuffers& buffers, DecodeOptions options = {},
              void* stream = nullptr);
  void decode_variant(const Variant& variant, int splits, const AttentionProblem& problem,
                      const AttentionBuffers& buffers, void* stream = nullptr);
  // The variant and split count decode would use.
  DecodeChoice explain_decode(const AttentionProblem& problem, DecodeOptions options = {}) const;

  // Backward attention: dQ, dK and dV from Q, K, V, O, dO and the forward's
  // LSE (buffers as for forward; dO laid out like O, the gradients like Q, K
  // and V). Probabilities are recomputed tile by tile from the LSE; dK and dV
  // sum over the query heads of a KV head. Same validation and stream rules
  // as forward; the fp32 workspaces are allocated per call (a plan's run
  // takes them from the caller).
  void backward(const AttentionProblem& problem, const BackwardBuffers& buffers, BackwardOptions options = {},
                void* stream = nullptr);
  void backward_variant(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                        void* stream = nullptr);
  // The flash_bwd variant backward would run, and the rule that chose it.
  DispatchChoice explain_backward(const AttentionProblem& problem, BackwardOptions options = {}) const;

  Backend backend() const;
  const std::string& device_key() const;
  const ArchLimits& arch() const;
  int sm_count() const;  // the emulator: kEmulatedSmCount, or ATTUNE_EMU_SMS
  std::string device_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attune
