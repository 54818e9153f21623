// Where kernels run, behind one small interface, so the launch sequence of
// each operation (launch/ops.h) is written once: the CUDA driver
// (cuda_backend.h) or the CPU emulator (emu_backend.h).
//
//   const LoadedKernel kernel = backend.load(variant, DType::kBF16, Compile::kAllowed);  // once
//   std::unique_ptr<LaunchBackend::Call> call = backend.begin(stream);
//   call->buffer("Q", q, q_bytes);                                    // checked by the emulator
//   call->launch(kernel, config, &params, sizeof(params));
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor_map.h"
#include "emulator/launch.h"
#include "generator/variants.h"

namespace attune {

// Whether loading may compile: never inside a CUDA graph capture, where
// NVRTC and module loads would stall or break the capture.
enum class Compile : std::uint8_t { kAllowed, kRefused };

// A kernel ready to launch: compiled and loaded (cuda), or the emulator's
// instantiation of the variant (emu).
struct LoadedKernel {
  Variant variant;
  DType dtype = DType::kBF16;
  void* function = nullptr;    // cuda: the CUkernel
  std::size_t param_size = 0;  // cuda: the kernel's parameter bytes as the driver tells them; 0: unknown
};

class LaunchBackend {
 public:
  virtual ~LaunchBackend() = default;

  // The kernel of `variant` for `dtype`, compiled and loaded on first use.
  // Throws InvalidArgument when the variant cannot run on this backend, or
  // is not loaded yet and `compile` refuses it; nvrtc::NvrtcUnavailable,
  // cuda::CudaError or Error (a failed compile).
  virtual LoadedKernel load(const Variant& variant, DType dtype, Compile compile) = 0;
  // True when load() of `variant` for `dtype` needs no compile.
  virtual bool loaded(const Variant& variant, DType dtype) = 0;

  // One call's launches, in order, on `stream` (cuda; the emulator runs each
  // launch to completion). The buffers a call's kernels may touch are named
  // first: the emulator checks every access against them.
  class Call {
   public:
    virtual ~Call() = default;
    virtual void buffer(const char* name, const void* data, std::size_t bytes) = 0;
    virtual void launch(const LoadedKernel& kernel, const LaunchConfig& config, const void* params,
                        std::size_t params_size) = 0;
    // The backend's tensor map for `spec` (the driver's, or the emulator's),
    // cached by its inputs. Throws InvalidArgument for a spec TMA refuses.
    virtual TensorMap tensor_map(const TensorMapSpec& spec) = 0;
    // Sets `words` 32-bit words of a named buffer to zero, in order with
    // the launches (a memset node in a captured graph).
    virtual void zero(void* data, std::size_t words) = 0;
  };
  virtual std::unique_ptr<Call> begin(void* stream) = 0;

  // Backend memory for a call's metadata and workspaces when the caller
  // passes them on the host. The emulator's starts as NaN bytes, so a kernel
  // that reads what nobody wrote shows it.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* pointer) = 0;  // null is ignored
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void synchronize(void* stream) = 0;
  // True when backend pointers are host pointers (the emulator): host
  // metadata needs no copy.
  virtual bool host_memory() const = 0;
  // Multiprocessors of the device (the emulator's: kEmulatedSmCount, or
  // ATTUNE_EMU_SMS): how many CTAs a persistent kernel launches.
  virtual int sm_count() const = 0;
};

}  // namespace attune
