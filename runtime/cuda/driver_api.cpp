#include "runtime/cuda/driver_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <string_view>

#include "core/dl_symbol.h"

namespace attune::cuda::detail {

// The symbols load_api resolves are the ones cuda.h maps these names to; a
// header that moves a name to another ABI version (and so another signature
// in Api) fails to compile here instead of misbehaving at run time.
#define ATTUNE_STRINGIFY(x) #x
#define ATTUNE_SYMBOL_OF(fn) ATTUNE_STRINGIFY(fn)
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuDeviceTotalMem)) == "cuDeviceTotalMem_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemAlloc)) == "cuMemAlloc_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemFree)) == "cuMemFree_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemcpyHtoD)) == "cuMemcpyHtoD_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemcpyDtoH)) == "cuMemcpyDtoH_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuEventDestroy)) == "cuEventDestroy_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuEventElapsedTime)) == "cuEventElapsedTime_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuLaunchKernel)) == "cuLaunchKernel");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuLaunchKernelEx)) == "cuLaunchKernelEx");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemsetD32Async)) == "cuMemsetD32Async");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuStreamSynchronize)) == "cuStreamSynchronize");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuStreamGetCtx)) == "cuStreamGetCtx");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuStreamIsCapturing)) == "cuStreamIsCapturing");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuEventRecord)) == "cuEventRecord");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuCtxGetCurrent)) == "cuCtxGetCurrent");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuLibraryLoadData)) == "cuLibraryLoadData");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuKernelSetAttribute)) == "cuKernelSetAttribute");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuStreamCreate)) == "cuStreamCreate");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuStreamDestroy)) == "cuStreamDestroy_v2");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuDevicePrimaryCtxRetain)) == "cuDevicePrimaryCtxRetain");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuLibraryGetGlobal)) == "cuLibraryGetGlobal");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemHostAlloc)) == "cuMemHostAlloc");
static_assert(std::string_view(ATTUNE_SYMBOL_OF(cuMemHostGetDevicePointer)) == "cuMemHostGetDevicePointer_v2");
#undef ATTUNE_SYMBOL_OF
#undef ATTUNE_STRINGIFY

std::atomic<const Api*> g_api{nullptr};

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

namespace {

std::string unavailable(const std::string& what, const std::string& remedy) {
  return one_line("cuda backend unavailable: " + what + "; " + remedy + ", or use --backend emu");
}

}  // namespace

// The name and description of `code` as the library being loaded gives them.
// The toolkit's stub answers every call with CUDA_ERROR_STUB_LIBRARY, its
// own name calls included, so that one code is named here.
std::string explain(const Api& api, CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  std::string out = api.get_error_name(code, &name) == CUDA_SUCCESS && name != nullptr ? std::string(name)
                    : code == CUDA_ERROR_STUB_LIBRARY ? std::string("CUDA_ERROR_STUB_LIBRARY")
                                                      : "CUDA error " + std::to_string(code);
  if (api.get_error_string(code, &text) == CUDA_SUCCESS && text != nullptr) {
    out += " (" + std::string(text) + ")";
  } else if (code == CUDA_ERROR_STUB_LIBRARY) {
    out += " (the toolkit's stub library, not a driver)";
  }
  return out;
}

// Opens `path`, resolves every entry point and calls cuInit. On failure the
// library is closed again and the DriverUnavailable message returned, naming
// the library as `shown`.
std::string load_api(const std::string& path, const std::string& shown, Api& api) {
  dlerror();
  api.library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.library == nullptr) {
    const char* error = dlerror();
    const std::string reason = error != nullptr ? error : "dlopen failed";
    const bool missing = reason.find("No such file") != std::string::npos;
    return unavailable(shown + (missing ? " not found (" : " cannot be loaded (") + reason + ")",
                       "install the NVIDIA driver");
  }
  std::string missing;
  const auto need = [&](auto& fn, const char* symbol) {
    if (missing.empty() && !resolve_symbol(api.library, symbol, fn)) missing = symbol;
  };
  need(api.init, "cuInit");
  need(api.driver_get_version, "cuDriverGetVersion");
  need(api.get_error_name, "cuGetErrorName");
  need(api.get_error_string, "cuGetErrorString");
  need(api.device_get_count, "cuDeviceGetCount");
  need(api.device_get, "cuDeviceGet");
  need(api.device_get_name, "cuDeviceGetName");
  need(api.device_get_attribute, "cuDeviceGetAttribute");
  need(api.device_total_mem, "cuDeviceTotalMem_v2");
  need(api.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  need(api.ctx_get_current, "cuCtxGetCurrent");
  need(api.ctx_set_current, "cuCtxSetCurrent");
  need(api.library_load_data, "cuLibraryLoadData");
  need(api.library_unload, "cuLibraryUnload");
  need(api.library_get_kernel, "cuLibraryGetKernel");
  need(api.kernel_get_function, "cuKernelGetFunction");
  need(api.kernel_set_attribute, "cuKernelSetAttribute");
  need(api.launch_kernel, "cuLaunchKernel");
  need(api.launch_kernel_ex, "cuLaunchKernelEx");
  need(api.stream_synchronize, "cuStreamSynchronize");
  need(api.stream_get_ctx, "cuStreamGetCtx");
  need(api.stream_is_capturing, "cuStreamIsCapturing");
  need(api.stream_create, "cuStreamCreate");
  need(api.stream_destroy, "cuStreamDestroy_v2");
  need(api.mem_alloc, "cuMemAlloc_v2");
  need(api.mem_free, "cuMemFree_v2");
  need(api.memcpy_htod, "cuMemcpyHtoD_v2");
  need(api.memcpy_dtoh, "cuMemcpyDtoH_v2");
  need(api.memset_d32_async, "cuMemsetD32Async");
  need(api.pointer_get_attribute, "cuPointerGetAttribute");
  need(api.event_create, "cuEventCreate");
  need(api.event_record, "cuEventRecord");
  need(api.event_synchronize, "cuEventSynchronize");
  need(api.event_destroy, "cuEventDestroy_v2");
  // _v2 exists from driver 12.8 on; the first version has the same signature
  // and meaning for the default events made here.
  if (missing.empty() && !resolve_symbol(api.library, "cuEventElapsedTime_v2", api.event_elapsed_time)) {
    need(api.event_elapsed_time, "cuEventElapsedTime");
  }
  resolve_symbol(api.library, "cuKernelGetParamInfo", api.kernel_get_param_info);
  resolve_symbol(api.library, "cuTensorMapEncodeTiled", api.tensor_map_encode_tiled);
  resolve_symbol(api.library, "cuLibraryGetGlobal", api.library_get_global);
  resolve_symbol(api.library, "cuMemHostAlloc", api.mem_host_alloc);
  resolve_symbol(api.library, "cuMemHostGetDevicePointer_v2", api.mem_host_get_device_pointer);

  std::string failure;
  if (!missing.empty()) {
    failure = unavailable(shown + " is not a CUDA driver or is too old (no symbol " + missing + ")",
                          "update the NVIDIA driver");
  } else if (const CUresult status = api.init(0); status != CUDA_SUCCESS) {
    failure = unavailable(
        "cuInit failed in " + shown + ": " + explain(api, status),
        status == CUDA_ERROR_STUB_LIBRARY ? "install the NVIDIA driver" : "check that nvidia-smi lists the GPU");
  } else if (const CUresult v = api.driver_get_version(&api.version); v != CUDA_SUCCESS) {
    failure = unavailable("cuDriverGetVersion failed in " + shown + ": " + explain(api, v),
                          "check the NVIDIA driver installation");
  }
  if (!failure.empty()) {
    dlclose(api.library);
    api = Api{};
  }
  return failure;
}

}  // namespace attune::cuda::detail
