// A function of a library opened with dlopen, typed: how the runtime reaches
// the CUDA driver and NVRTC without linking them.
//
//   int (*version)(int*, int*) = nullptr;
//   if (!attune::resolve_symbol(handle, "nvrtcVersion", version)) ...
#pragma once

#include <dlfcn.h>

namespace attune {

template <typename Fn>
bool resolve_symbol(void* library, const char* symbol, Fn& fn) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) return false;
  // POSIX: data and function pointers share one representation (C++
  // leaves this cast conditionally supported; every POSIX compiler has it).
  fn = reinterpret_cast<Fn>(address);
  return true;
}

}  // namespace attune
