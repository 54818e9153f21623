#include "runtime/cuda/cuda_driver.h"

#include "runtime/cuda/driver_api.h"

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "core/bounds_text.h"
#include "core/device_checks.h"
#include "templates/primitives/bounds_report.h"
#include "templates/primitives/wait_report.h"

namespace attune::cuda {

namespace {

using detail::Api;
using detail::g_api;
using detail::load_api;
using detail::one_line;

// Errors after which the context answers every call with the same error
// (cuda.h: "the process must be terminated and relaunched").
constexpr std::array kStickyErrors{
    CUDA_ERROR_ECC_UNCORRECTABLE,
    CUDA_ERROR_NVLINK_UNCORRECTABLE,
    CUDA_ERROR_CONTAINED,
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_LAUNCH_TIMEOUT,
    CUDA_ERROR_ASSERT,
    CUDA_ERROR_HARDWARE_STACK_ERROR,
    CUDA_ERROR_ILLEGAL_INSTRUCTION,
    CUDA_ERROR_MISALIGNED_ADDRESS,
    CUDA_ERROR_INVALID_ADDRESS_SPACE,
    CUDA_ERROR_INVALID_PC,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_TENSOR_MEMORY_LEAK,
    CUDA_ERROR_MPS_CLIENT_TERMINATED,
    CUDA_ERROR_EXTERNAL_DEVICE,
};

// Device addresses as the host API shows them: opaque pointers.
static_assert(sizeof(CUdeviceptr) == sizeof(void*));
CUdeviceptr to_device(const void* ptr) { return std::bit_cast<CUdeviceptr>(ptr); }
void* from_device(CUdeviceptr ptr) { return std::bit_cast<void*>(ptr); }

// The driver's own description of a code ("" without a driver).
std::string describe(int code) {
  if (const Api* api = g_api.load(std::memory_order_acquire)) {
    const char* text = nullptr;
    if (api->get_error_string(static_cast<CUresult>(code), &text) == CUDA_SUCCESS && text != nullptr) return text;
  }
  return {};
}

}  // namespace

// -- errors -------------------------------------------------------------------

std::string error_name(int code) {
  if (const Api* api = g_api.load(std::memory_order_acquire)) {
    const char* name = nullptr;
    if (api->get_error_name(static_cast<CUresult>(code), &name) == CUDA_SUCCESS && name != nullptr) return name;
  }
  return "CUDA error " + std::to_string(code);
}

bool is_sticky_error(int code) {
  return std::find(kStickyErrors.begin(), kStickyErrors.end(), code) != kStickyErrors.end();
}

namespace {}  // namespace

std::string describe_wait_report(const WaitReport* report) {
  if (report == nullptr) return {};
  const volatile WaitReport* r = report;  // written by a kernel behind the compiler's back
  if (r->magic != kWaitReportMagic) return {};
  char text[320];
  const unsigned thread = r->thread;
  const unsigned long long word = r->state;
  const auto done = [&](unsigned bit) { return (word >> bit) & 1ULL ? "complete" : "not complete"; };
  std::snprintf(text, sizeof(text),
                "mbarrier wait gave up after %.1f ms (bound %u ms): block (%u, %u, %u), thread %u (warp %u, lane %u), "
                "barrier at shared 0x%x, waiting for parity %u; then parity 0 %s, parity 1 %s",
                static_cast<double>(r->waited_ns) * 1e-6, static_cast<unsigned>(r->bound_ms),
                static_cast<unsigned>(r->block[0]), static_cast<unsigned>(r->block[1]),
                static_cast<unsigned>(r->block[2]), thread, thread / 32, thread % 32, static_cast<unsigned>(r->barrier),
                static_cast<unsigned>(r->parity), done(0), done(1));
  return text;
}

namespace {

// The host-mapped report of bounded waits (core/device_checks.h): allocated
// when the first kernel compiled with the bound is looked up, never freed
// (kernels of every context may write it until the process ends).
std::atomic<WaitReport*> g_wait_report{nullptr};
std::atomic<int> g_wait_report_installs{0};  // modules whose global points at it
// The host-mapped report of clamped lengths and pages (bounds_report.h).
std::atomic<BoundsReport*> g_bounds_report{nullptr};

std::string cuda_error_message(int code, const std::string& operation) {
  std::string message = operation + " failed: " + error_name(code);
  if (const std::string description = describe(code); !description.empty()) message += " (" + description + ")";
  if (is_sticky_error(code)) {
    // A trap after a bounded wait gave up: say which barrier it waited on.
    if (const std::string report = describe_wait_report(g_wait_report.load(std::memory_order_acquire));
        !report.empty()) {
      message += "; " + report;
    }
    message += "; the CUDA context is now unusable: restart the process";
  }
  return one_line(message);
}

// The first sticky error of this process, never freed (like the driver):
// the context is unusable from then on, so every later call throws it again
// at once instead of reaching the driver with a new operation's name.
std::atomic<const CudaError*> g_lost{nullptr};

void check(CUresult status, const std::string& operation) {
  if (status == CUDA_SUCCESS) return;
  CudaError error(status, operation);
  if (error.sticky() && g_lost.load(std::memory_order_acquire) == nullptr) {
    const CudaError* expected = nullptr;
    auto* kept = new CudaError(error);
    if (!g_lost.compare_exchange_strong(expected, kept, std::memory_order_acq_rel)) delete kept;
  }
  throw error;
}

// What attune knows of the calling thread's context while a ContextScope is
// open: nothing until a call inside it first needs a context (a run on a
// stream never does), then the caller's, asked for once, and the current
// one after attune's own switches, so later calls need not ask again.
struct ScopeState {
  int depth = 0;
  bool known = false;
  CUcontext saved = nullptr;    // the caller's, when known
  CUcontext current = nullptr;  // the thread's, when known
};
thread_local ScopeState t_scope;

void check_context() {
  if (const CudaError* lost = g_lost.load(std::memory_order_acquire)) throw *lost;
}

}  // namespace

CudaError::CudaError(int code, const std::string& operation)
    : Error(cuda_error_message(code, operation)),
      code_(code),
      name_(error_name(code)),
      sticky_(is_sticky_error(code)) {}

// -- devices ------------------------------------------------------------------

std::string DeviceInfo::arch() const {
  // Hopper and datacenter Blackwell features (wgmma, setmaxnreg, tcgen05) are
  // only in the arch-specific targets; such cubins run only on that exact
  // compute capability, which is what a per-device compile wants.
  const bool arch_specific = compute_major == 9 || compute_major == 10;
  return "sm_" + std::to_string(compute_major * 10 + compute_minor) + (arch_specific ? "a" : "");
}

std::string DeviceInfo::key() const {
  return name + "/cc" + std::to_string(compute_major) + "." + std::to_string(compute_minor) + "/sm" +
         std::to_string(sm_count);
}

// -- driver -------------------------------------------------------------------

struct Driver::Impl {
  Api api;
  std::mutex mutex;                 // guards contexts
  std::vector<CUcontext> contexts;  // primary contexts by ordinal, retained for the process's life

  CUcontext primary_context(int device) {
    if (device < 0) throw InvalidArgument("cuda: device ordinal " + std::to_string(device) + " is negative");
    const std::lock_guard lock(mutex);
    if (contexts.size() <= static_cast<std::size_t>(device)) contexts.resize(device + 1, nullptr);
    if (contexts[device] == nullptr) {
      CUdevice handle = 0;
      check(api.device_get(&handle, device), "cuDeviceGet(" + std::to_string(device) + ")");
      check(api.primary_ctx_retain(&contexts[device], handle),
            "cuDevicePrimaryCtxRetain(" + std::to_string(device) + ")");
    }
    return contexts[device];
  }

  // The thread's current context: asked once per ContextScope, and at each
  // call outside one.
  CUcontext current_context() const {
    if (t_scope.depth > 0 && t_scope.known) return t_scope.current;
    CUcontext current = nullptr;
    check(api.ctx_get_current(&current), "cuCtxGetCurrent");
    if (t_scope.depth > 0) {
      t_scope.known = true;
      t_scope.saved = current;
      t_scope.current = current;
    }
    return current;
  }

  void make_current(CUcontext context) const {
    check_context();
    if (current_context() == context) return;
    check(api.ctx_set_current(context), "cuCtxSetCurrent");
    if (t_scope.depth > 0) t_scope.current = context;
  }

  void make_current(int device) { make_current(primary_context(device)); }

  // Points a module's report slot (a global pointer named `symbol`) at the
  // process's host-mapped report `slot` (allocated on first need), in the
  // current context. False when the module has no such global or the driver
  // lacks the entry points: the kernel then reports nothing (a bounded wait
  // still traps, a clamp still clamps).
  template <class Report>
  bool install_slot(CUlibrary library, const std::string& kernel, const char* symbol, std::atomic<Report*>& slot) {
    if (api.library_get_global == nullptr || api.mem_host_alloc == nullptr ||
        api.mem_host_get_device_pointer == nullptr) {
      return false;
    }
    CUdeviceptr global = 0;
    std::size_t bytes = 0;
    if (api.library_get_global(&global, &bytes, library, symbol) != CUDA_SUCCESS || bytes != sizeof(void*)) {
      return false;
    }
    Report* host = slot.load(std::memory_order_acquire);
    if (host == nullptr) {
      void* memory = nullptr;
      check(api.mem_host_alloc(&memory, sizeof(Report), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            std::string("cuMemHostAlloc(") + symbol + ")");
      std::memset(memory, 0, sizeof(Report));
      Report* expected = nullptr;
      if (slot.compare_exchange_strong(expected, static_cast<Report*>(memory))) {
        host = static_cast<Report*>(memory);
      } else {
        host = expected;  // another thread won; its memory serves (ours stays pinned, unused)
      }
    }
    CUdeviceptr mapped = 0;
    check(api.mem_host_get_device_pointer(&mapped, host, 0), std::string("cuMemHostGetDevicePointer(") + symbol + ")");
    check(api.memcpy_htod(global, &mapped, sizeof(mapped)),
          "cuMemcpyHtoD(" + std::string(symbol) + " of " + kernel + ")");
    return true;
  }

  // The context of `stream`; for the null stream the current one, or device
  // 0's primary context when the thread has none.
  void make_current_for(CUstream stream) {
    check_context();
    if (stream != nullptr) {
      CUcontext context = nullptr;
      check(api.stream_get_ctx(stream, &context), "cuStreamGetCtx");
      make_current(context);
      return;
    }
    if (current_context() == nullptr) make_current(0);
  }

  // Device memory is reached through the primary context of its device.
  void make_current_for(const void* device_ptr) {
    check_context();
    int device = 0;
    check(api.pointer_get_attribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, to_device(device_ptr)),
          "cuPointerGetAttribute(DEVICE_ORDINAL)");
    make_current(device);
  }

  int attribute(CUdevice device, CUdevice_attribute which, const char* name) const {
    int value = 0;
    check(api.device_get_attribute(&value, which, device), std::string("cuDeviceGetAttribute(") + name + ")");
    return value;
  }
};

Driver::Driver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Driver::~Driver() = default;

namespace detail {

std::string driver_library_path() {
  const char* path = std::getenv("ATTUNE_LIBCUDA");
  return path != nullptr && *path != '\0' ? path : "libcuda.so.1";
}

std::string probe_driver_library(const std::string& path) {
  Api api;
  return load_api(path, path, api);
}

}  // namespace detail

Driver& Driver::get() {
  // Never destroyed: kernels may still run while static destructors do, and
  // libcuda is not unloaded after cuInit.
  static std::atomic<Driver*> instance{nullptr};
  static std::mutex mutex;
  if (Driver* driver = instance.load(std::memory_order_acquire)) return *driver;
  const std::lock_guard lock(mutex);
  if (Driver* driver = instance.load(std::memory_order_relaxed)) return *driver;
  auto impl = std::make_unique<Impl>();
  const std::string path = detail::driver_library_path();
  const bool from_env = std::getenv("ATTUNE_LIBCUDA") != nullptr && path != "libcuda.so.1";
  const std::string shown = from_env ? path + " (from ATTUNE_LIBCUDA)" : path;
  if (std::string failure = load_api(path, shown, impl->api); !failure.empty()) {
    throw DriverUnavailable(failure);
  }
  g_api.store(&impl->api, std::memory_order_release);
  auto* driver = new Driver(std::move(impl));
  instance.store(driver, std::memory_order_release);
  return *driver;
}

bool Driver::available(std::string* why) {
  return succeeds([] { get(); }, why);
}

int Driver::version() const { return impl_->api.version; }

const CudaError* Driver::lost_context() const { return g_lost.load(std::memory_order_acquire); }

std::string wait_report() { return describe_wait_report(g_wait_report.load(std::memory_order_acquire)); }

int wait_report_installs() { return g_wait_report_installs.load(std::memory_order_relaxed); }

std::string bounds_report() {
  const BoundsReport* r = g_bounds_report.load(std::memory_order_acquire);
  if (r == nullptr) return {};
  BoundsReport copy;
  std::memcpy(&copy, r, sizeof(copy));
  return copy.magic == kBoundsReportMagic ? describe_bounds_report(copy) : std::string();
}

void clear_bounds_report() {
  if (BoundsReport* r = g_bounds_report.load(std::memory_order_acquire)) {
    volatile BoundsReport* v = r;
    v->magic = 0;
    v->generation = v->generation + 1;  // kernels report again, once
  }
}

void reset_wait_report() {
  if (WaitReport* r = g_wait_report.load(std::memory_order_acquire)) std::memset(r, 0, sizeof(WaitReport));
}

void Driver::check_usable() const { check_context(); }

std::vector<DeviceInfo> Driver::devices() const {
  const Api& api = impl_->api;
  int count = 0;
  check(api.device_get_count(&count), "cuDeviceGetCount");
  std::vector<DeviceInfo> result;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    check(api.device_get(&device, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
    DeviceInfo info;
    info.ordinal = ordinal;
    std::array<char, 256> name{};
    check(api.device_get_name(name.data(), static_cast<int>(name.size()), device), "cuDeviceGetName");
    info.name = name.data();
    info.compute_major =
        impl_->attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
    info.compute_minor =
        impl_->attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
    info.sm_count = impl_->attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
    info.max_shared_per_block_optin = impl_->attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                       "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN");
    info.l2_bytes = impl_->attribute(device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE");
    std::size_t total = 0;
    check(api.device_total_mem(&total, device), "cuDeviceTotalMem");
    info.total_memory = total;
    result.push_back(std::move(info));
  }
  return result;
}

Driver::Module Driver::load_module(int device, std::span<const char> cubin) {
  if (cubin.empty()) throw InvalidArgument("cuda: load_module got an empty cubin");
  check_context();
  CUlibrary library = nullptr;
  check(impl_->api.library_load_data(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "cuLibraryLoadData");
  return Module{library, device};
}

void Driver::unload_module(Module module) {
  if (module.handle == nullptr) return;
  check_context();
  check(impl_->api.library_unload(static_cast<CUlibrary>(module.handle)), "cuLibraryUnload");
}

Driver::Function Driver::function(Module module, const std::string& lowered_name) {
  check_context();
  const Api& api = impl_->api;
  CUkernel kernel = nullptr;
  check(api.library_get_kernel(&kernel, static_cast<CUlibrary>(module.handle), lowered_name.c_str()),
        "cuLibraryGetKernel(" + lowered_name + ")");
  // Loaded into the device's primary context now, not lazily at a first
  // launch that may be inside a graph capture.
  impl_->make_current(module.device);
  CUfunction loaded = nullptr;
  check(api.kernel_get_function(&loaded, kernel), "cuKernelGetFunction(" + lowered_name + ")");
  const auto library = static_cast<CUlibrary>(module.handle);
  impl_->install_slot(library, lowered_name, "attune_bounds_report", g_bounds_report);
  if (wait_bound_ms() > 0 && impl_->install_slot(library, lowered_name, "attune_wait_report", g_wait_report)) {
    g_wait_report_installs.fetch_add(1, std::memory_order_relaxed);
  }
  Function function{kernel, module.device, 0};
  if (api.kernel_get_param_info != nullptr) {
    std::size_t offset = 0;
    std::size_t size = 0;
    if (api.kernel_get_param_info(kernel, 0, &offset, &size) == CUDA_SUCCESS) function.param_size = size;
  }
  return function;
}

void Driver::set_max_dynamic_shared(Function function, int bytes) {
  check_context();
  const Api& api = impl_->api;
  CUdevice device = 0;
  check(api.device_get(&device, function.device), "cuDeviceGet(" + std::to_string(function.device) + ")");
  check(api.kernel_set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes,
                                 static_cast<CUkernel>(function.handle), device),
        "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(bytes) + ")");
}

void Driver::launch(Function function, const LaunchConfig& config, const void* params, std::size_t params_size,
                    void* stream) {
  const auto positive = [](const Dim3& d) { return d.x > 0 && d.y > 0 && d.z > 0; };
  if (!positive(config.grid) || !positive(config.block)) {
    throw InvalidArgument("cuda: launch needs positive grid and block dimensions, got grid (" +
                          std::to_string(config.grid.x) + ", " + std::to_string(config.grid.y) + ", " +
                          std::to_string(config.grid.z) + ") block (" + std::to_string(config.block.x) + ", " +
                          std::to_string(config.block.y) + ", " + std::to_string(config.block.z) + ")");
  }
  if (config.dynamic_shared_bytes < 0 || config.dynamic_shared_bytes > std::numeric_limits<unsigned>::max()) {
    throw InvalidArgument("cuda: dynamic shared memory of " + std::to_string(config.dynamic_shared_bytes) +
                          " bytes is out of range");
  }
  const Dim3& cd = config.cluster;
  if (!positive(cd) || config.grid.x % cd.x != 0 || config.grid.y % cd.y != 0 || config.grid.z % cd.z != 0) {
    throw InvalidArgument("cuda: cluster (" + std::to_string(cd.x) + ", " + std::to_string(cd.y) + ", " +
                          std::to_string(cd.z) + ") for grid (" + std::to_string(config.grid.x) + ", " +
                          std::to_string(config.grid.y) + ", " + std::to_string(config.grid.z) +
                          "): expected positive sizes that divide the grid's");
  }
  if (params_size > 0 && params == nullptr) throw InvalidArgument("cuda: launch got a null params pointer");
  // A params struct that differs between host and kernel would launch with
  // garbage; the driver told the kernel's side at load time.
  if (function.param_size != 0 && function.param_size != params_size) {
    throw InvalidArgument("cuda: the kernel's parameter is " + std::to_string(function.param_size) +
                          " bytes, the host params struct " + std::to_string(params_size) + " bytes");
  }
  check_context();
  // A kernel launches into its stream's context: a run on a stream touches
  // no context at all. The null stream is the current context's.
  if (stream == nullptr) impl_->make_current(function.device);
  const Api& api = impl_->api;
  auto* handle = static_cast<CUfunction>(function.handle);  // a CUkernel, as cuLaunchKernel takes it
  void* arguments[] = {const_cast<void*>(params)};          // the driver only reads it
  if (volume(cd) > 1) {  // a cluster shape is a launch attribute, which only cuLaunchKernelEx takes
    CUlaunchAttribute cluster{};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = static_cast<unsigned>(cd.x);
    cluster.value.clusterDim.y = static_cast<unsigned>(cd.y);
    cluster.value.clusterDim.z = static_cast<unsigned>(cd.z);
    CUlaunchConfig launch{};
    launch.gridDimX = static_cast<unsigned>(config.grid.x);
    launch.gridDimY = static_cast<unsigned>(config.grid.y);
    launch.gridDimZ = static_cast<unsigned>(config.grid.z);
    launch.blockDimX = static_cast<unsigned>(config.block.x);
    launch.blockDimY = static_cast<unsigned>(config.block.y);
    launch.blockDimZ = static_cast<unsigned>(config.block.z);
    launch.sharedMemBytes = static_cast<unsigned>(config.dynamic_shared_bytes);
    launch.hStream = static_cast<CUstream>(stream);
    launch.attrs = &cluster;
    launch.numAttrs = 1;
    check(api.launch_kernel_ex(&launch, handle, params_size > 0 ? arguments : nullptr, nullptr), "cuLaunchKernelEx");
    return;
  }
  check(api.launch_kernel(handle, static_cast<unsigned>(config.grid.x), static_cast<unsigned>(config.grid.y),
                          static_cast<unsigned>(config.grid.z), static_cast<unsigned>(config.block.x),
                          static_cast<unsigned>(config.block.y), static_cast<unsigned>(config.block.z),
                          static_cast<unsigned>(config.dynamic_shared_bytes), static_cast<CUstream>(stream),
                          params_size > 0 ? arguments : nullptr, nullptr),
        "cuLaunchKernel");
}

bool Driver::is_capturing(void* stream) {
  impl_->make_current_for(static_cast<CUstream>(stream));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(impl_->api.stream_is_capturing(static_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;  // active, or invalidated: either way not ours to touch
}

Driver::ContextScope::ContextScope(Driver& driver) : driver_(driver) {
  check_context();
  t_scope.depth += 1;
}

Driver::ContextScope::~ContextScope() {
  t_scope.depth -= 1;
  if (t_scope.depth > 0 || !t_scope.known) return;  // the outermost scope restores, if anything changed
  t_scope.known = false;
  // A caller without a context keeps ours current (as the CUDA runtime
  // does); another context is made current again. Never throws; after a
  // sticky error nothing reaches the driver again (every call fails fast).
  const CUcontext saved = t_scope.saved;
  if (saved == nullptr || t_scope.current == saved || g_lost.load(std::memory_order_acquire) != nullptr) return;
  (void)driver_.impl_->api.ctx_set_current(saved);
}

TensorMap Driver::encode_tensor_map(const TensorMapSpec& spec) {
  check_tensor_map(spec);  // the driver's rules, with attune's messages
  if (impl_->api.tensor_map_encode_tiled == nullptr) {
    throw DriverUnavailable(
        "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a driver for CUDA 12.0 or later)");
  }
  const auto type = spec.element_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                    : spec.element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                    : spec.element_bytes == 4
                        ? (spec.fp32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_UINT32)
                        : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  const auto swizzle = spec.swizzle == sm90::Swizzle::k128B  ? CU_TENSOR_MAP_SWIZZLE_128B
                       : spec.swizzle == sm90::Swizzle::k64B ? CU_TENSOR_MAP_SWIZZLE_64B
                       : spec.swizzle == sm90::Swizzle::k32B ? CU_TENSOR_MAP_SWIZZLE_32B
                                                             : CU_TENSOR_MAP_SWIZZLE_NONE;
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap), "the 128 bytes of a tensor map");
  CUtensorMap map{};
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 4> strides{};
  std::array<cuuint32_t, 5> box{};
  std::array<cuuint32_t, 5> element_strides{};
  for (std::size_t i = 0; i < 5; ++i) {
    dims[i] = spec.dims[i];
    box[i] = spec.box[i];
    element_strides[i] = spec.element_strides[i];
  }
  for (std::size_t i = 0; i < 4; ++i) strides[i] = spec.strides[i];
  // Elements outside the tensor read as zeros (no NaN fill); no L2 promotion.
  check(impl_->api.tensor_map_encode_tiled(&map, type, static_cast<cuuint32_t>(spec.rank),
                                           const_cast<void*>(spec.address), dims.data(), strides.data(), box.data(),
                                           element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                           CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  TensorMap out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

void* Driver::create_stream(int device) {
  impl_->make_current(device);
  CUstream stream = nullptr;
  // Blocking: ordered after the synchronous copies, which use the legacy
  // default stream.
  check(impl_->api.stream_create(&stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  return stream;
}

void Driver::destroy_stream(void* stream) {
  if (stream == nullptr || g_lost.load(std::memory_order_acquire) != nullptr) return;
  (void)impl_->api.stream_destroy(static_cast<CUstream>(stream));
}

void Driver::synchronize(void* stream) {
  impl_->make_current_for(static_cast<CUstream>(stream));
  check(impl_->api.stream_synchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
}

void* Driver::allocate(int device, std::size_t bytes) {
  impl_->make_current(device);
  CUdeviceptr ptr = 0;
  check(impl_->api.mem_alloc(&ptr, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  return from_device(ptr);
}

void Driver::release(void* device_ptr) {
  if (device_ptr == nullptr) return;
  impl_->make_current_for(static_cast<const void*>(device_ptr));
  check(impl_->api.mem_free(to_device(device_ptr)), "cuMemFree");
}

void Driver::zero_async(int device, void* dst, std::size_t words, void* stream) {
  if (words == 0) return;
  check_context();
  if (stream == nullptr) impl_->make_current(device);
  check(impl_->api.memset_d32_async(to_device(dst), 0, words, static_cast<CUstream>(stream)),
        "cuMemsetD32Async(" + std::to_string(words) + " words)");
}

void Driver::copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  impl_->make_current_for(static_cast<const void*>(dst));
  check(impl_->api.memcpy_htod(to_device(dst), src, bytes), "cuMemcpyHtoD(" + std::to_string(bytes) + " bytes)");
}

void Driver::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  impl_->make_current_for(src);
  check(impl_->api.memcpy_dtoh(dst, to_device(src), bytes), "cuMemcpyDtoH(" + std::to_string(bytes) + " bytes)");
}

namespace {

// An event destroyed however the timing ends.
class Event {
 public:
  explicit Event(const Api& api) : api_(api) { check(api_.event_create(&handle_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (handle_ != nullptr) api_.event_destroy(handle_);
  }
  CUevent get() const { return handle_; }

 private:
  const Api& api_;
  CUevent handle_ = nullptr;
};

}  // namespace

float Driver::time_ms(void* stream, const std::function<void()>& body) {
  const Api& api = impl_->api;
  auto* cu_stream = static_cast<CUstream>(stream);
  impl_->make_current_for(cu_stream);
  const Event start(api);
  const Event end(api);
  check(api.event_record(start.get(), cu_stream), "cuEventRecord");
  body();
  check(api.event_record(end.get(), cu_stream), "cuEventRecord");
  check(api.event_synchronize(end.get()), "cuEventSynchronize");
  float ms = 0;
  check(api.event_elapsed_time(&ms, start.get(), end.get()), "cuEventElapsedTime");
  return ms;
}

DeviceBuffers::DeviceBuffers(Driver& driver, const std::vector<Spec>& specs, int device) : driver_(driver) {
  try {
    for (const Spec& spec : specs) {
      // A zero-byte tensor still gets a distinct, valid pointer.
      pointers_.push_back(driver_.allocate(device, spec.bytes > 0 ? spec.bytes : 1));
      if (spec.host != nullptr && spec.bytes > 0) driver_.copy_to_device(pointers_.back(), spec.host, spec.bytes);
    }
  } catch (...) {
    for (void* p : pointers_) driver_.release(p);
    throw;
  }
}

DeviceBuffers::~DeviceBuffers() {
  for (void* p : pointers_) {
    try {
      driver_.release(p);
    } catch (const Error&) {
      // A poisoned context cannot free; the process must restart anyway.
    }
  }
}

}  // namespace attune::cuda
