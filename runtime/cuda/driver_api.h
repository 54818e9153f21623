// The CUDA driver's entry points, resolved from libcuda at run time: the
// process starts without a driver, says why one cannot be used, and the
// tests point it at a recording stand-in (ATTUNE_LIBCUDA). Internal to
// runtime/cuda/ (cuda_driver.cpp wraps it).
#pragma once

#include <cuda.h>

#include <atomic>
#include <string>

namespace attune::cuda::detail {

// The driver's entry points. Each is resolved by the symbol of the ABI
// version cuda.h maps its name to (`#define cuMemAlloc cuMemAlloc_v2`), with
// legacy default-stream semantics (not the _ptsz/_ptds variants); the type is
// that of the same declaration.
struct Api {
  void* library = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuLibraryLoadData) library_load_data = nullptr;
  decltype(&::cuLibraryUnload) library_unload = nullptr;
  decltype(&::cuLibraryGetKernel) library_get_kernel = nullptr;
  decltype(&::cuKernelGetFunction) kernel_get_function = nullptr;
  decltype(&::cuKernelSetAttribute) kernel_set_attribute = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuLaunchKernelEx) launch_kernel_ex = nullptr;  // thread block clusters
  decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&::cuStreamGetCtx) stream_get_ctx = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;
  decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;
  decltype(&::cuMemsetD32Async) memset_d32_async = nullptr;
  decltype(&::cuPointerGetAttribute) pointer_get_attribute = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventSynchronize) event_synchronize = nullptr;
  decltype(&::cuEventElapsedTime) event_elapsed_time = nullptr;
  decltype(&::cuEventDestroy) event_destroy = nullptr;
  decltype(&::cuKernelGetParamInfo) kernel_get_param_info = nullptr;      // optional: drivers from 12.4 on
  decltype(&::cuTensorMapEncodeTiled) tensor_map_encode_tiled = nullptr;  // optional: drivers from 12.0 on
  // Optional: bounded waits' reports (core/device_checks.h), drivers from 12.0 on.
  decltype(&::cuLibraryGetGlobal) library_get_global = nullptr;
  decltype(&::cuMemHostAlloc) mem_host_alloc = nullptr;
  decltype(&::cuMemHostGetDevicePointer) mem_host_get_device_pointer = nullptr;
  int version = 0;
};

// Opens `path`, resolves every entry point and calls cuInit. On failure the
// library is closed again and the DriverUnavailable message returned, naming
// the library as `shown`.
std::string load_api(const std::string& path, const std::string& shown, Api& api);

// The loaded driver, once Driver::get() has succeeded; error_name asks it.
extern std::atomic<const Api*> g_api;

// The name and description of `code` as the library being loaded gives them.
std::string explain(const Api& api, CUresult code);
// `text` on one line, for messages.
std::string one_line(std::string text);

}  // namespace attune::cuda::detail
