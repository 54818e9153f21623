// attune::Runtime: picks the variant for a problem on the device in hand,
// compiles it once with NVRTC (through the kernel cache), and launches it.
//
// Example (CUDA; pointers are device memory, `stream` a CUstream or null):
//   attune::Runtime runtime({.backend = attune::Backend::kCuda});
//   attune::AttentionProblem problem = attune::make_problem(q_shape, k_shape, v_shape,
//       {.dtype = attune::DType::kBF16, .mask = attune::Mask::causal_bottom_right()});
//   runtime.forward(problem, {q, k, v, o, lse}, stream);
// The same with Backend::kEmu runs on the CPU emulator over host pointers.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/problem.h"
#include "runtime/dispatch/dispatcher.h"

namespace attune {

enum class Backend : std::uint8_t { kCuda, kEmu };
std::string_view to_string(Backend backend);  // "cuda", "emu"
std::optional<Backend> parse_backend(std::string_view name);

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

  // Forward attention: O (and LSE when set). Validates the problem and the
  // buffers (InvalidArgument), compiles on first use, launches on `stream`
  // (cuda; ignored by emu). Varlen and padded problems upload their lengths
  // and synchronize the stream before returning. After a sticky CUDA error
  // (illegal address, launch failure) every later call throws that
  // cuda::CudaError again at once, compiling and launching nothing: the
  // context is lost until the process restarts. Thread-safe.
  void forward(const AttentionProblem& problem, const AttentionBuffers& buffers, void* stream = nullptr);

  // The same with a given variant instead of the dispatcher's choice (the
  // tuner, `attune attention --variant`). Throws InvalidArgument when the
  // variant cannot run the problem on this device.
  void forward_variant(const Variant& variant, const AttentionProblem& problem, const AttentionBuffers& buffers,
                       void* stream = nullptr);

  // What forward would run, and the rule that chose it.
  DispatchChoice explain(const AttentionProblem& problem) const;

  // Split-KV decode (few query rows against a long, contiguous or paged KV
  // cache): the keys are split across CTAs and their partial states merged.
  // `options.splits` 0 lets the built-in heuristic fill the GPU in whole
  // waves. Same validation and stream rules as forward; forward() of a paged
  // problem comes here.
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
  // as forward; the fp32 workspaces are allocated per call.
  void backward(const AttentionProblem& problem, const BackwardBuffers& buffers, BackwardOptions options = {},
                void* stream = nullptr);
  void backward_variant(const Variant& variant, const AttentionProblem& problem, const BackwardBuffers& buffers,
                        void* stream = nullptr);
  // The flash_bwd variant backward would run, and the rule that chose it.
  DispatchChoice explain_backward(const AttentionProblem& problem, BackwardOptions options = {}) const;

  Backend backend() const;
  const std::string& device_key() const;
  const ArchLimits& arch() const;
  int sm_count() const;  // the emulator: kEmulatedSmCount
  std::string device_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attune
