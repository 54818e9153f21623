// One launch sequence per operation over a LaunchBackend::Call: the kernels a call
// needs, their params and grids, the buffers they touch, early returns and
// the split combine, written once for the cuda backend and the emulator.
//
//   const ForwardKernels kernels = load_forward(backend, variant, problem.compute_dtype());
//   CallMemory memory(backend, problem, 0, stream);    // host metadata, copied when needed
//   launch_forward(*backend.begin(stream), problem, kernels, buffers, memory.metadata());
//   memory.finish();                                    // waits before freeing what it allocated
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "core/append_problem.h"
#include "core/problem.h"
#include "runtime/launch/backend.h"
#include "runtime/launch/kernel_params.h"

namespace attune {

// The loaded kernels of one call of each operation.
struct ForwardKernels {
  LoadedKernel main;  // flash_fwd or flash_fwd_sm90
  // With flash_fwd_sm90: loads (on the first call that needs it, with the
  // compile permission load_forward had) the flash_fwd variant that runs
  // calls TMA cannot map. Empty otherwise.
  std::function<LoadedKernel()> fallback;
  int sm_count = 0;           // the device's: a persistent flash_fwd_sm90 launches one CTA per SM at most
  LoadedKernel varlen_tiles;  // sm90_varlen_tiles, for flash_fwd_sm90's varlen scheduler
};
struct DecodeKernels {
  LoadedKernel main;     // flash_decode
  LoadedKernel combine;  // flash_decode_combine, when splits > 1
  int splits = 1;
  int split_tiles = 0;  // key tiles per split (a fixed split size); 0: each sequence's tiles in `splits` parts
};
struct BackwardKernels {
  LoadedKernel preprocess;  // flash_bwd_preprocess
  LoadedKernel main;        // flash_bwd or flash_bwd_sm90
  LoadedKernel convert;     // flash_bwd_dq_convert
  LoadedKernel dsink;       // flash_bwd_dsink, with sinks
  // With flash_bwd_sm90: loads (on the first call that needs it) the
  // flash_bwd variant, dQ by atomics like it, that runs calls it cannot
  // map. Empty otherwise.
  std::function<LoadedKernel()> fallback;
  // The device's multiprocessors: flash_bwd_sm90's persistent CTAs.
  int sm_count = 1;
};

// Loads what a call needs; InvalidArgument when `variant` is not a variant
// of the operation's kernel (or the split count is out of range).
ForwardKernels load_forward(LaunchBackend& backend, const Variant& variant, DType dtype,
                            Compile compile = Compile::kAllowed);
DecodeKernels load_decode(LaunchBackend& backend, const Variant& variant, int splits, DType dtype,
                          Compile compile = Compile::kAllowed, int split_tiles = 0);
// `sinks`: the problem has attention sinks (the backward then also loads
// the dsink reduction).
BackwardKernels load_backward(LaunchBackend& backend, const Variant& variant, DType dtype, bool sinks = false,
                              Compile compile = Compile::kAllowed);

// Bytes of workspace a call needs (0: none): fp32 partials, or the
// dynamic tile scheduler's counter.
std::size_t forward_workspace_bytes(const AttentionProblem& problem, const ForwardKernels& kernels);
std::size_t decode_workspace_bytes(const AttentionProblem& problem, const DecodeKernels& kernels);
std::size_t backward_workspace_bytes(const AttentionProblem& problem, const BackwardKernels& kernels);

// The launches of one validated call. Buffers and metadata are in backend
// memory; `workspace` holds the bytes the functions above give.
void launch_forward(LaunchBackend::Call& call, const AttentionProblem& problem, const ForwardKernels& kernels,
                    const AttentionBuffers& buffers, const DeviceMetadata& metadata, void* workspace);
void launch_decode(LaunchBackend::Call& call, const AttentionProblem& problem, const DecodeKernels& kernels,
                   const AttentionBuffers& buffers, const DeviceMetadata& metadata, float* workspace);
void launch_backward(LaunchBackend::Call& call, const AttentionProblem& problem, const BackwardKernels& kernels,
                     const BackwardBuffers& buffers, const DeviceMetadata& metadata, float* workspace);

// A validated merge (merge_states_params.h): one launch.
void launch_merge(LaunchBackend::Call& call, const MergeProblem& problem, const LoadedKernel& kernel,
                  std::span<const void* const> o, std::span<const float* const> lse, void* out_o, float* out_lse);
// A validated append (core/append_problem.h): one launch.
void launch_append(LaunchBackend::Call& call, const AppendProblem& problem, const LoadedKernel& kernel,
                   const AppendBuffers& buffers);

// A call's host metadata and workspace in backend memory: on the emulator
// the problem's own arrays and a NaN-filled workspace; on cuda device copies
// made here. finish() waits for the stream before freeing anything it
// allocated; the destructor (reached without finish() only when an
// exception is on its way) waits too, ignoring a failure, then frees.
class CallMemory {
 public:
  CallMemory(LaunchBackend& backend, const AttentionProblem& problem, std::size_t workspace_bytes, void* stream);
  ~CallMemory();
  CallMemory(const CallMemory&) = delete;
  CallMemory& operator=(const CallMemory&) = delete;
  const DeviceMetadata& metadata() const { return metadata_; }
  float* workspace() const { return static_cast<float*>(workspace_); }
  void finish();

 private:
  const std::int32_t* copy(const std::vector<std::int32_t>& host);
  void release_all();

  LaunchBackend& backend_;
  void* stream_;
  DeviceMetadata metadata_;
  void* workspace_ = nullptr;
  std::vector<void*> owned_;
};

}  // namespace attune
