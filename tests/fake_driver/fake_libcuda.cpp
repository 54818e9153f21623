// A recording stand-in for the CUDA driver (libcuda.so.1), loaded by the
// runtime through ATTUNE_LIBCUDA: it reports one device, hands out host
// memory as device memory, records every call, runs nothing, and fails the
// calls it is told to fail.
//
// Control, from the environment (for commands) or from the test process
// (dlopen the same file: the runtime's handle is shared):
//   ATTUNE_FAKE_CUDA_LOG=FILE            append one line per call ("cuLaunchKernel grid=...")
//   ATTUNE_FAKE_CUDA_FAIL=NAME:N:CODE,.. the N-th call (1-based) of NAME returns CODE
//   ATTUNE_FAKE_CUDA_DEVICE=NAME,MAJOR,MINOR,SMS
//   attune_fake_count(NAME), attune_fake_total(), attune_fake_reset(), attune_fake_fail(NAME, N, CODE),
//   attune_fake_set_capturing(0|1), attune_fake_last_launch(...)
//   attune_fake_global(NAME): where the last library's global NAME lives
//     ("attune_wait_report" or "attune_bounds_report": each library has
//     them, 8 bytes each, as cuLibraryGetGlobal finds them), for a test to
//     act as a kernel writing through it
// A sticky code (illegal address, launch failure, ...) poisons the fake
// context: every later call returns it, as the real driver does. Contexts
// are checked as the driver checks them: a kernel launches into its
// stream's context, so a launch on the null stream, and cuKernelGetFunction,
// need a current context (CUDA_ERROR_INVALID_CONTEXT otherwise).
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Failure {
  std::string name;
  long at;  // the call count at which it fires
  int code;
};

struct State {
  std::mutex mutex;
  std::map<std::string, long> counts;
  std::vector<Failure> failures;
  int poisoned = 0;  // a sticky error seen
  int capturing = 0;
  // Live "device" allocations: still reachable when a lost context never
  // frees them (as on a GPU, the memory goes with the context), so the
  // sanitizer build's leak check does not count them.
  std::set<void*> allocations;
  std::string device_name = "attune fake GPU";
  int major = 9;
  int minor = 0;
  int sms = 132;
  unsigned last_grid[3] = {0, 0, 0};
  unsigned last_block[3] = {0, 0, 0};
  unsigned last_shared = 0;
  std::map<std::pair<CUlibrary, std::string>, void*> globals;  // each library's 8-byte report slots
  std::map<std::string, void*> last_global;
  FILE* log = nullptr;
  bool configured = false;
};

State& state() {
  static State* s = new State;  // never destroyed: calls may come during exit
  return *s;
}

bool sticky(int code) {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return true;
    default:
      return false;
  }
}

void configure_locked(State& s) {
  if (s.configured) return;
  s.configured = true;
  if (const char* path = std::getenv("ATTUNE_FAKE_CUDA_LOG"); path != nullptr && *path != '\0') {
    s.log = std::fopen(path, "a");
  }
  if (const char* spec = std::getenv("ATTUNE_FAKE_CUDA_FAIL"); spec != nullptr) {
    std::string text = spec;
    std::size_t begin = 0;
    while (begin < text.size()) {
      const std::size_t end = std::min(text.find(',', begin), text.size());
      const std::string item = text.substr(begin, end - begin);
      const std::size_t a = item.find(':');
      const std::size_t b = item.find(':', a == std::string::npos ? a : a + 1);
      if (a != std::string::npos && b != std::string::npos) {
        s.failures.push_back({item.substr(0, a), std::atol(item.substr(a + 1, b - a - 1).c_str()),
                              std::atoi(item.substr(b + 1).c_str())});
      }
      begin = end + 1;
    }
  }
  if (const char* spec = std::getenv("ATTUNE_FAKE_CUDA_DEVICE"); spec != nullptr) {
    std::string text = spec;
    const std::size_t a = text.find(',');
    const std::size_t b = text.find(',', a + 1);
    const std::size_t c = text.find(',', b + 1);
    if (a != std::string::npos && b != std::string::npos && c != std::string::npos) {
      s.device_name = text.substr(0, a);
      s.major = std::atoi(text.substr(a + 1, b - a - 1).c_str());
      s.minor = std::atoi(text.substr(b + 1, c - b - 1).c_str());
      s.sms = std::atoi(text.substr(c + 1).c_str());
    }
  }
}

// Records a call and says what it returns.
CUresult record(const char* name, const std::string& detail = "") {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  configure_locked(s);
  const long n = ++s.counts[name];
  if (s.log != nullptr) {
    std::fprintf(s.log, "%s%s%s\n", name, detail.empty() ? "" : " ", detail.c_str());
    std::fflush(s.log);
  }
  if (s.poisoned != 0) return static_cast<CUresult>(s.poisoned);
  for (const Failure& f : s.failures) {
    if (f.name == name && f.at == n) {
      if (sticky(f.code)) s.poisoned = f.code;
      return static_cast<CUresult>(f.code);
    }
  }
  return CUDA_SUCCESS;
}

struct Named {
  int code;
  const char* name;
  const char* text;
};
// The codes this stand-in returns: what its tests inject.
constexpr Named kNames[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
};

// Distinct handles, never dereferenced: nothing to free, so nothing leaks
// when a caller (or a test) never unloads.
template <class Handle>
Handle next_handle() {
  static std::atomic<std::uintptr_t> next{0x1000};
  return reinterpret_cast<Handle>(next.fetch_add(16));
}

unsigned char* g_context_tag = new unsigned char[1];  // the one context's handle
thread_local CUcontext g_current = nullptr;

}  // namespace

extern "C" {

// -- control (for tests) -------------------------------------------------------

long attune_fake_count(const char* name) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.counts.find(name);
  return it == s.counts.end() ? 0 : it->second;
}

// Every call recorded since the last reset, whatever its name.
long attune_fake_total() {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  long total = 0;
  for (const auto& [name, n] : s.counts) total += n;
  return total;
}

void attune_fake_reset() {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  configure_locked(s);
  s.counts.clear();
  s.failures.clear();
  s.poisoned = 0;
  s.capturing = 0;
}

// The `nth` next call of `name` (1-based, counted from now) returns `code`.
void attune_fake_fail(const char* name, long nth, int code) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  configure_locked(s);
  s.failures.push_back({name, s.counts[name] + nth, code});
}

void attune_fake_set_capturing(int capturing) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.capturing = capturing;
}

void* attune_fake_global(const char* name) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.last_global.find(name);
  return it == s.last_global.end() ? nullptr : it->second;
}

void attune_fake_last_launch(unsigned* grid, unsigned* block, unsigned* shared) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (int i = 0; i < 3; ++i) {
    grid[i] = s.last_grid[i];
    block[i] = s.last_block[i];
  }
  *shared = s.last_shared;
}

// -- the driver API ------------------------------------------------------------

CUresult cuInit(unsigned int) { return record("cuInit"); }
CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return record("cuDriverGetVersion");
}
CUresult cuGetErrorName(CUresult code, const char** name) {
  for (const Named& n : kNames) {
    if (n.code == code) {
      *name = n.name;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult code, const char** text) {
  for (const Named& n : kNames) {
    if (n.code == code) {
      *text = n.text;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return record("cuDeviceGetCount");
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? record("cuDeviceGet") : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDeviceGetName(char* name, int length, CUdevice) {
  const CUresult r = record("cuDeviceGetName");
  std::snprintf(name, static_cast<std::size_t>(length), "%s", state().device_name.c_str());
  return r;
}
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  const CUresult r = record("cuDeviceGetAttribute");
  State& s = state();
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = s.major;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = s.minor;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = s.sms;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = 232448;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = 60 << 20;
      break;
    default:
      *value = 0;
  }
  return r;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = size_t{141} << 30;
  return record("cuDeviceTotalMem_v2");
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(g_context_tag);
  return record("cuDevicePrimaryCtxRetain");
}
CUresult cuCtxGetCurrent(CUcontext* context) {
  *context = g_current;
  return record("cuCtxGetCurrent");
}
CUresult cuCtxSetCurrent(CUcontext context) {
  g_current = context;
  return record("cuCtxSetCurrent");
}
CUresult cuLibraryLoadData(CUlibrary* library, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**,
                           unsigned) {
  *library = next_handle<CUlibrary>();
  return record("cuLibraryLoadData");
}
CUresult cuLibraryUnload(CUlibrary) { return record("cuLibraryUnload"); }
CUresult cuLibraryGetGlobal(CUdeviceptr* ptr, size_t* bytes, CUlibrary library, const char* name) {
  const CUresult r = record("cuLibraryGetGlobal", name);
  if (r != CUDA_SUCCESS) return r;
  if (std::strcmp(name, "attune_wait_report") != 0 && std::strcmp(name, "attune_bounds_report") != 0) {
    return CUDA_ERROR_NOT_FOUND;
  }
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  void*& global = s.globals[{library, name}];
  if (global == nullptr) global = std::calloc(1, 8);  // lives as long as the process, like the library's
  s.last_global[name] = global;
  *ptr = reinterpret_cast<CUdeviceptr>(global);
  *bytes = 8;
  return CUDA_SUCCESS;
}
CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary, const char* name) {
  *kernel = next_handle<CUkernel>();
  return record("cuLibraryGetKernel", name);
}
CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  const CUresult r = record("cuKernelGetFunction");
  if (r != CUDA_SUCCESS) return r;
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *function = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}
CUresult cuKernelSetAttribute(CUfunction_attribute, int value, CUkernel, CUdevice) {
  return record("cuKernelSetAttribute", std::to_string(value));
}
CUresult cuStreamCreate(CUstream* stream, unsigned) {
  *stream = next_handle<CUstream>();
  return record("cuStreamCreate");
}
CUresult cuStreamDestroy_v2(CUstream) { return record("cuStreamDestroy_v2"); }
CUresult cuLaunchKernel(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void**, void**) {
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.last_grid[0] = gx;
    s.last_grid[1] = gy;
    s.last_grid[2] = gz;
    s.last_block[0] = bx;
    s.last_block[1] = by;
    s.last_block[2] = bz;
    s.last_shared = shared;
  }
  const CUresult r =
      record("cuLaunchKernel", "grid=" + std::to_string(gx) + "," + std::to_string(gy) + "," + std::to_string(gz) +
                                   " block=" + std::to_string(bx) + "," + std::to_string(by) + "," +
                                   std::to_string(bz) + " shared=" + std::to_string(shared));
  if (r == CUDA_SUCCESS && stream == nullptr && g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return r;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void**, void**) {
  unsigned cluster[3] = {1, 1, 1};
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    cluster[0] = config->attrs[i].value.clusterDim.x;
    cluster[1] = config->attrs[i].value.clusterDim.y;
    cluster[2] = config->attrs[i].value.clusterDim.z;
  }
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.last_grid[0] = config->gridDimX;
    s.last_grid[1] = config->gridDimY;
    s.last_grid[2] = config->gridDimZ;
    s.last_block[0] = config->blockDimX;
    s.last_block[1] = config->blockDimY;
    s.last_block[2] = config->blockDimZ;
    s.last_shared = config->sharedMemBytes;
  }
  const auto three = [](unsigned a, unsigned b, unsigned c) {
    return std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c);
  };
  const CUresult r =
      record("cuLaunchKernelEx", "grid=" + three(config->gridDimX, config->gridDimY, config->gridDimZ) +
                                     " block=" + three(config->blockDimX, config->blockDimY, config->blockDimZ) +
                                     " shared=" + std::to_string(config->sharedMemBytes) +
                                     " cluster=" + three(cluster[0], cluster[1], cluster[2]));
  if (r == CUDA_SUCCESS && config->hStream == nullptr && g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return r;
}
CUresult cuStreamSynchronize(CUstream) { return record("cuStreamSynchronize"); }
CUresult cuStreamGetCtx(CUstream, CUcontext* context) {
  *context = reinterpret_cast<CUcontext>(g_context_tag);
  return record("cuStreamGetCtx");
}
CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  *status = state().capturing != 0 ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return record("cuStreamIsCapturing");
}
CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  const CUresult r = record("cuMemAlloc_v2", std::to_string(bytes));
  if (r != CUDA_SUCCESS) return r;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.allocations.insert(p);
  }
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) {
  void* p = reinterpret_cast<void*>(ptr);
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.allocations.erase(p);
  }
  std::free(p);
  return record("cuMemFree_v2");
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  const CUresult r = record("cuMemcpyHtoD_v2", std::to_string(bytes));
  if (r == CUDA_SUCCESS) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return r;
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t count, CUstream) {
  const CUresult r = record("cuMemsetD32Async", std::to_string(count) + " words");
  if (r == CUDA_SUCCESS) std::fill_n(reinterpret_cast<unsigned*>(dst), count, value);
  return r;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  const CUresult r = record("cuMemcpyDtoH_v2", std::to_string(bytes));
  if (r == CUDA_SUCCESS) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return r;
}
// Host memory is device memory here, mapped or not.
CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  const CUresult r = record("cuMemHostAlloc", std::to_string(bytes) + " flags " + std::to_string(flags));
  if (r != CUDA_SUCCESS) return r;
  *ptr = std::calloc(1, bytes);
  return *ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* ptr, void* host, unsigned) {
  *ptr = reinterpret_cast<CUdeviceptr>(host);
  return record("cuMemHostGetDevicePointer_v2");
}
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute, CUdeviceptr) {
  *static_cast<int*>(data) = 0;
  return record("cuPointerGetAttribute");
}
CUresult cuEventCreate(CUevent* event, unsigned) {
  *event = reinterpret_cast<CUevent>(new unsigned char[1]);
  return record("cuEventCreate");
}
CUresult cuEventRecord(CUevent, CUstream) { return record("cuEventRecord"); }
CUresult cuEventSynchronize(CUevent) { return record("cuEventSynchronize"); }
CUresult cuEventElapsedTime(float* ms, CUevent, CUevent) {
  *ms = 0.01F;
  return record("cuEventElapsedTime");
}
CUresult cuEventDestroy_v2(CUevent event) {
  delete[] reinterpret_cast<unsigned char*>(event);
  return record("cuEventDestroy_v2");
}

// Writes what it was given into the map, for a test to read back: the
// address, rank, element type, swizzle, then dims, boxes and strides.
CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* /*element_strides*/, CUtensorMapInterleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  const CUresult r = record("cuTensorMapEncodeTiled", "rank " + std::to_string(rank));
  if (r != CUDA_SUCCESS) return r;
  auto* words = reinterpret_cast<cuuint64_t*>(map);
  words[0] = reinterpret_cast<cuuint64_t>(address);
  words[1] = rank;
  words[2] = static_cast<cuuint64_t>(type);
  words[3] = static_cast<cuuint64_t>(swizzle);
  for (cuuint32_t i = 0; i < rank && i < 5; ++i) {
    words[4 + i] = dims[i];
    words[9 + i] = box[i];
  }
  if (rank > 1) words[14] = strides[0];
  return r;
}

}  // extern "C"
