// The emulator backend: kernels run on the CPU over host buffers, every
// access checked (emu::KernelFault on a bug), and the emulate_* calls that
// run one variant of an operation on it (tests, `attune attention --backend
// emu --variant`).
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "emulator/counters.h"
#include "runtime/launch/backend.h"
#include "runtime/launch/tensor_map_cache.h"

namespace attune {

// The limits variants are checked against on the emulator: any block that
// fits in host memory (256 KiB of shared memory per block).
const ArchLimits& emulator_limits();

// The SM count of the emulated device: an H100/H200-class GPU's 132, or
// ATTUNE_EMU_SMS (1 to 1024), so that persistent kernels run more tiles
// than CTAs on small problems. InvalidArgument for another value.
int emulated_sm_count();
// ATTUNE_EMU_SEED (emu::Emulator::Options::schedule_seed): the order the
// emulator runs blocks and sweeps threads in; 0 or unset: grid order.
std::uint64_t emulated_schedule_seed();

class EmuBackend final : public LaunchBackend {
 public:
  LoadedKernel load(const Variant& variant, DType dtype, Compile compile) override;
  bool loaded(const Variant& /*variant*/, DType /*dtype*/) override { return true; }  // nothing to compile
  std::unique_ptr<Call> begin(void* stream) override;
  void* allocate(std::size_t bytes) override;
  void release(void* pointer) override;
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override;
  void synchronize(void* /*stream*/) override {}
  bool host_memory() const override { return true; }
  int sm_count() const override { return emulated_sm_count(); }

  // What every call's launches did, summed (emulator/counters.h): the speed
  // model's measurements.
  const emu::LaunchCounters& counters() const { return counters_; }
  TensorMapCache& tensor_maps() { return tensor_maps_; }

 private:
  emu::LaunchCounters counters_;
  TensorMapCache tensor_maps_;
};

// Each emulate_* adds what its launches did to `counters` when given
// (emulator/counters.h).
//
// Computes O (and LSE when buffers.lse is set) for a validated problem whose
// tensors are 16-bit storage in host memory, with a flash_fwd or
// flash_fwd_sm90 variant (a call the latter cannot map runs on flash_fwd).
// Throws emu::KernelFault when the emulator finds a bug, InvalidArgument
// when the variant cannot run the problem.
void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                     emu::LaunchCounters* counters = nullptr);

// The split-KV decode: a flash_decode variant over `splits` CTAs per row
// block, then flash_decode_combine when splits > 1. Contiguous or paged.
void emulate_decode(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                    int splits, emu::LaunchCounters* counters = nullptr);

// dQ, dK and dV with a flash_bwd variant (O and LSE as the forward wrote
// them); the fp32 workspaces start as NaN.
//
//   emulate_backward(problem, {q, k, v, o, d_o, lse, dq, dk, dv},
//                    parse_variant_id("flash_bwd/d64.bm64.bn64.wm2.wn4.st2.at0"));
void emulate_backward(const AttentionProblem& problem, const BackwardBuffers& buffers, const Variant& variant,
                      emu::LaunchCounters* counters = nullptr);

}  // namespace attune
