// The CUDA driver backend: libcuda loaded with dlopen at run time, so attune
// builds and runs (with the emulator) where no NVIDIA driver is installed.
//
//   if (std::string why; !attune::cuda::Driver::available(&why)) return fall_back_to_emulator(why);
//   attune::cuda::Driver& driver = attune::cuda::Driver::get();
//   const auto module = driver.load_module(0, compiled.cubin);
//   const auto kernel = driver.function(module, compiled.lowered_name);
//   void* stream = driver.create_stream(0);
//   driver.launch(kernel, config, &params, sizeof(params), stream);   // no context switch
//   driver.synchronize(stream);
//
// The header needs no CUDA toolkit: modules, functions, streams and device
// pointers are opaque handles (CUmodule, CUfunction, CUstream, CUdeviceptr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_map.h"
#include "emulator/launch.h"
#include "templates/primitives/wait_report.h"

namespace attune::cuda {

// The driver could not be loaded or initialised. The message is one line:
// "cuda backend unavailable: libcuda.so.1 not found (...); install the NVIDIA
// driver, or use --backend emu".
class DriverUnavailable : public Error {
 public:
  using Error::Error;
};

// A CUDA call failed: "cuLibraryLoadData failed: CUDA_ERROR_INVALID_PTX (a PTX
// JIT compilation failed)". A sticky error poisons the context (every later
// call returns it too), and the message then ends with "; the CUDA context is
// now unusable: restart the process".
class CudaError : public Error {
 public:
  CudaError(int code, const std::string& operation);
  int code() const { return code_; }
  const std::string& name() const { return name_; }
  bool sticky() const { return sticky_; }

 private:
  int code_;
  std::string name_;
  bool sticky_;
};

// "CUDA_ERROR_ILLEGAL_ADDRESS" for 700: the driver's cuGetErrorName once it
// is loaded, else "CUDA error N" (errors only come from a loaded driver).
std::string error_name(int code);

// One line for a WaitReport a kernel wrote ("" when null or incomplete).
std::string describe_wait_report(const WaitReport* report);

// What a kernel compiled with a wait bound (core/device_checks.h) wrote when
// it gave up waiting on an mbarrier, as one line; "" when none has. Host
// memory only: readable after the context is lost, and never loads the
// driver (the sticky error's message carries it too).
std::string wait_report();
// How many loaded modules had their report slot pointed at that memory (a
// wait that trapped with no report in a module that was never counted here
// had no slot: the driver lacks the entry points, or the global was not found).
int wait_report_installs();
// Clears the report (a test that wrote one on purpose, before the next).
void reset_wait_report();

// What a GPU kernel wrote when it clamped a length or page index read from
// device memory (templates/primitives/bounds_report.h), as one line; "" when
// none since the last clear. Host memory: no sync (a run's report is there
// once the run is complete). Never loads the driver.
std::string bounds_report();
// Clears it: kernels report the next event again.
void clear_bounds_report();

// True for the codes after which the context is unusable (illegal address,
// launch failure, device assert, ECC uncorrectable, ...).
bool is_sticky_error(int code);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  int max_shared_per_block_optin = 0;  // bytes, with cuKernelSetAttribute
  int l2_bytes = 0;
  std::uint64_t total_memory = 0;  // bytes

  // The NVRTC architecture to compile for: "sm_80", "sm_86", "sm_89",
  // "sm_90a" for 9.0 and "sm_100a" for 10.0 (the arch-specific variants, so
  // wgmma and tcgen05 are usable), "sm_120" for 12.0.
  std::string arch() const;
  // Identity of the device model for caches and tuning results:
  // "NVIDIA H200/cc9.0/sm132". Never the name alone: one name covers parts
  // with different SM counts.
  std::string key() const;
};

// The process's CUDA driver. Calls that take a device make the primary
// context of that device current on the calling thread; calls on a pointer,
// module or function use the device it belongs to. A null stream is the
// default stream of the context current on the calling thread (device 0's
// when none is). Every failing call throws CudaError naming the operation.
class Driver {
 public:
  // Loads libcuda.so.1 (or $ATTUNE_LIBCUDA when set, for tests), resolves its
  // entry points and calls cuInit, once per process; throws DriverUnavailable
  // otherwise. A failed load is not remembered, so a later call tries again.
  static Driver& get();
  // True when the driver loads; `why` gets the one-line reason otherwise.
  // Never throws.
  static bool available(std::string* why = nullptr);

  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
  ~Driver();

  int version() const;  // cuDriverGetVersion: 13000 for CUDA 13.0

  // The first sticky CudaError this process saw (illegal address, launch
  // failure, ...), or null. From then on every call that uses a context
  // throws a copy of it at once, with its message, instead of reaching the
  // driver: the context cannot recover, only a new process can.
  const CudaError* lost_context() const;
  // Throws the lost context's error, if any; for callers about to do slow
  // work (an NVRTC compile) before their first driver call.
  void check_usable() const;
  std::vector<DeviceInfo> devices() const;

  // Cubins load context-independently (cuLibraryLoadData); a function is
  // made resident in its device's primary context when it is looked up, so
  // no launch ever loads. Its handle is a CUkernel, which launches into the
  // context of the stream it is given.
  struct Module {
    void* handle = nullptr;  // CUlibrary
    int device = 0;
  };
  struct Function {
    void* handle = nullptr;  // CUkernel
    int device = 0;
    std::size_t param_size = 0;  // the kernel's parameter in bytes (drivers from 12.4 on); 0: unknown
  };
  Module load_module(int device, std::span<const char> cubin);
  void unload_module(Module module);
  Function function(Module module, const std::string& lowered_name);
  // Allows `bytes` of dynamic shared memory per block; needed above 48 KiB.
  void set_max_dynamic_shared(Function function, int bytes);
  // Launches `function` with the params struct (`params_size` bytes at
  // `params`) passed by value as its single argument, into the context of
  // `stream`: on a stream, the launch is the only driver call (the
  // caller's current context is not read or changed); the null stream is
  // that of the device's primary context. A size that differs from the
  // kernel's parameter (where the driver tells it) is an InvalidArgument.
  void launch(Function function, const LaunchConfig& config, const void* params, std::size_t params_size, void* stream);
  // Sets `words` 32-bit words at `dst` (device memory of `device`) to zero
  // on `stream`, in stream order (cuMemsetD32Async: a memset node when the
  // stream is capturing a graph); the same contexts as launch.
  void zero_async(int device, void* dst, std::size_t words, void* stream);
  void synchronize(void* stream);
  // True while `stream` is capturing a CUDA graph (cuStreamIsCapturing):
  // nothing that allocates, copies, synchronizes or loads may run on it.
  bool is_capturing(void* stream);

  // Restores the calling thread's current context, as it was when the
  // scope began, when the scope ends: the driver calls above make their
  // device's primary context current, and a caller's own context must
  // survive a call into attune. Costs nothing until a call inside needs a
  // context (then one cuCtxGetCurrent for the whole scope); scopes nest,
  // the outermost restores.
  class ContextScope {
   public:
    explicit ContextScope(Driver& driver);
    ~ContextScope();
    ContextScope(const ContextScope&) = delete;
    ContextScope& operator=(const ContextScope&) = delete;

   private:
    Driver& driver_;
  };

  // A TMA tensor map (cuTensorMapEncodeTiled): check_tensor_map first, so a
  // map the GPU would refuse fails with attune's message here as on the
  // emulator. Drivers without the entry point (before CUDA 12.0) still load;
  // this call then throws DriverUnavailable. A host call: no context needed.
  TensorMap encode_tensor_map(const TensorMapSpec& spec);

  // A stream on `device` (cuStreamCreate, ordered with the legacy default
  // stream as the copies above are), for callers without
  // their own (the CLI); destroy_stream ignores null and a lost context.
  void* create_stream(int device);
  void destroy_stream(void* stream);

  // Device memory, for the runtime, tests and tools/gpu_check.
  void* allocate(int device, std::size_t bytes);
  void release(void* device_ptr);  // null is ignored
  void copy_to_device(void* dst, const void* src, std::size_t bytes);
  void copy_to_host(void* dst, const void* src, std::size_t bytes);

  // Milliseconds between two events recorded on `stream` around `body`.
  float time_ms(void* stream, const std::function<void()>& body);

 private:
  struct Impl;
  explicit Driver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Device allocations that live as long as the object: each is allocated on
// `device` and, when its host pointer is set, filled from it.
class DeviceBuffers {
 public:
  struct Spec {
    const void* host;  // null: allocate only
    std::size_t bytes;
  };
  DeviceBuffers(Driver& driver, const std::vector<Spec>& specs, int device = 0);
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  void* at(std::size_t index) const { return pointers_.at(index); }

 private:
  Driver& driver_;
  std::vector<void*> pointers_;
};

namespace detail {

// $ATTUNE_LIBCUDA when set and not empty, else "libcuda.so.1".
std::string driver_library_path();

// Runs the steps of Driver::get() on the library at `path` (dlopen, every
// entry point, cuInit) without touching the process's driver, and returns the
// DriverUnavailable message, or "" when the library works (it then stays
// loaded: a driver is not safely unloaded after cuInit). For tests.
std::string probe_driver_library(const std::string& path);

}  // namespace detail

}  // namespace attune::cuda
