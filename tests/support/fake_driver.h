// Where the recording fake driver (tests/fake_driver) is, and its controls,
// for tests that point ATTUNE_LIBCUDA at it.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace attune::testing {

// $ATTUNE_FAKE_LIBCUDA, else the build tree's copy beside this test's
// folder (tests/X/test -> tests/fake_driver/libattune_fake_libcuda.so).
inline std::string fake_libcuda_path() {
  if (const char* path = std::getenv("ATTUNE_FAKE_LIBCUDA"); path != nullptr && *path != '\0') return path;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (self.parent_path().parent_path() / "fake_driver" / "libattune_fake_libcuda.so").string();
}

// The fake's control functions, from the copy the runtime loaded.
class FakeDriver {
 public:
  FakeDriver() : handle_(dlopen(fake_libcuda_path().c_str(), RTLD_NOW)) {}
  ~FakeDriver() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeDriver(const FakeDriver&) = delete;
  FakeDriver& operator=(const FakeDriver&) = delete;
  bool loaded() const { return handle_ != nullptr; }
  long count(const char* call) const { return fn<long (*)(const char*)>("attune_fake_count")(call); }
  long total() const { return fn<long (*)()>("attune_fake_total")(); }  // every call, whatever its name
  void reset() const { fn<void (*)()>("attune_fake_reset")(); }
  void fail(const char* call, long nth, int code) const {
    fn<void (*)(const char*, long, int)>("attune_fake_fail")(call, nth, code);
  }
  void set_capturing(bool capturing) const { fn<void (*)(int)>("attune_fake_set_capturing")(capturing ? 1 : 0); }
  // The 8-byte global `name` ("attune_wait_report", "attune_bounds_report")
  // of the library last asked for it.
  void* global(const char* name) const { return fn<void* (*)(const char*)>("attune_fake_global")(name); }
  // The grid, block and dynamic shared bytes of the last cuLaunchKernel.
  void last_launch(unsigned* grid, unsigned* block, unsigned* shared) const {
    fn<void (*)(unsigned*, unsigned*, unsigned*)>("attune_fake_last_launch")(grid, block, shared);
  }

 private:
  template <class F>
  F fn(const char* name) const {
    return reinterpret_cast<F>(dlsym(handle_, name));
  }
  void* handle_;
};

}  // namespace attune::testing
