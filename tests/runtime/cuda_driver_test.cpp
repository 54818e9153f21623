// The CUDA driver backend. Without a driver (CI machines): the one-line
// "cuda backend unavailable" reasons, error names and sticky errors, device
// arch and key. With a GPU (suite CudaDriverGpuTest, CTest label gpu):
// devices, memory, and a kernel compiled with NVRTC, loaded and launched.
#include "runtime/cuda/cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generator/variants.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/runtime.h"
#include "templates/primitives/bounds_report.h"
#include "tests/support/env_guard.h"
#include "tests/support/fake_driver.h"
#include "tests/support/swizzled_tile_map.h"

namespace attune::cuda {
namespace {

constexpr const char* kPrefix = "cuda backend unavailable: ";

bool one_line_reason(const std::string& why) {
  return why.rfind(kPrefix, 0) == 0 && why.find('\n') == std::string::npos && why.ends_with("use --backend emu");
}

// Sets (or unsets) ATTUNE_LIBCUDA for one test.
class ScopedLibcuda {
 public:
  explicit ScopedLibcuda(const std::optional<std::string>& value) {
    if (const char* old = std::getenv("ATTUNE_LIBCUDA")) old_ = old;
    if (value) {
      setenv("ATTUNE_LIBCUDA", value->c_str(), 1);
    } else {
      unsetenv("ATTUNE_LIBCUDA");
    }
  }
  ~ScopedLibcuda() {
    if (old_) {
      setenv("ATTUNE_LIBCUDA", old_->c_str(), 1);
    } else {
      unsetenv("ATTUNE_LIBCUDA");
    }
  }
  ScopedLibcuda(const ScopedLibcuda&) = delete;
  ScopedLibcuda& operator=(const ScopedLibcuda&) = delete;

 private:
  std::optional<std::string> old_;
};

// A text file named like a library.
class NotALibrary {
 public:
  NotALibrary()
      : path_(std::filesystem::temp_directory_path() / ("attune_not_a_library_" + std::to_string(getpid()) + ".so")) {
    std::ofstream(path_) << "this is not a shared library\n";
  }
  ~NotALibrary() { std::filesystem::remove(path_); }
  NotALibrary(const NotALibrary&) = delete;
  NotALibrary& operator=(const NotALibrary&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The driver of this process loads: the tests of a missing driver do not apply.
bool driver_present() {
  const ScopedLibcuda unset(std::nullopt);
  return Driver::available();
}

TEST(CudaDriverTest, WithoutADriverTheReasonIsOneLineNamingLibcuda) {
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present";
  const ScopedLibcuda unset(std::nullopt);
  std::string why;
  EXPECT_FALSE(Driver::available(&why));
  EXPECT_TRUE(one_line_reason(why)) << why;
  EXPECT_NE(why.find("libcuda.so.1"), std::string::npos) << why;
  EXPECT_NE(why.find("install the NVIDIA driver"), std::string::npos) << why;
  try {
    Driver::get();
    FAIL() << "Driver::get() loaded a driver that available() did not";
  } catch (const DriverUnavailable& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
}

TEST(CudaDriverTest, AFailedLoadIsRetriedWithTheLibraryFromTheEnvironment) {
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present (a loaded driver is kept)";
  const std::string missing = "/nonexistent/attune/libcuda.so.1";
  {
    const ScopedLibcuda env(missing);
    std::string why;
    EXPECT_FALSE(Driver::available(&why));
    EXPECT_TRUE(one_line_reason(why)) << why;
    EXPECT_NE(why.find(missing + " (from ATTUNE_LIBCUDA) not found"), std::string::npos) << why;
  }
  const NotALibrary text;
  {
    const ScopedLibcuda env(text.path());
    std::string why;
    EXPECT_FALSE(Driver::available(&why));
    EXPECT_TRUE(one_line_reason(why)) << why;
    EXPECT_NE(why.find(text.path() + " (from ATTUNE_LIBCUDA) cannot be loaded"), std::string::npos) << why;
    EXPECT_THROW(Driver::get(), DriverUnavailable);
  }
}

TEST(CudaDriverTest, ProbeNamesAMissingPath) {
  const std::string missing = "/nonexistent/attune/libcuda.so";
  const std::string why = detail::probe_driver_library(missing);
  EXPECT_TRUE(one_line_reason(why)) << why;
  EXPECT_NE(why.find(missing + " not found ("), std::string::npos) << why;
}

TEST(CudaDriverTest, ProbeRejectsAFileThatIsNotALibrary) {
  const NotALibrary text;
  const std::string why = detail::probe_driver_library(text.path());
  EXPECT_TRUE(one_line_reason(why)) << why;
  EXPECT_NE(why.find(text.path() + " cannot be loaded ("), std::string::npos) << why;
}

TEST(CudaDriverTest, ProbeNamesTheFirstMissingSymbol) {
  const std::string why = detail::probe_driver_library("libm.so.6");
  EXPECT_TRUE(one_line_reason(why)) << why;
  EXPECT_NE(why.find("libm.so.6 is not a CUDA driver or is too old (no symbol cuInit)"), std::string::npos) << why;
}

// The toolkit's link stub exports every entry point, and its cuInit fails:
// this resolves every symbol the backend needs by its versioned name.
TEST(CudaDriverTest, ProbeOfTheStubResolvesEverySymbolAndReportsCuInit) {
  const char* stub_path = std::getenv("ATTUNE_CUDA_STUB");  // set by CTest
  if (stub_path == nullptr) GTEST_SKIP() << "ATTUNE_CUDA_STUB (the toolkit's stubs/libcuda.so) is not set";
  const std::string stub = stub_path;
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no CUDA stub library at " << stub;
  const std::string why = detail::probe_driver_library(stub);
  EXPECT_TRUE(one_line_reason(why)) << why;
  EXPECT_NE(why.find("cuInit failed in " + stub + ": CUDA_ERROR_STUB_LIBRARY ("), std::string::npos) << why;
  // The stub (soname libcuda.so.1) was closed again, so it does not stand in
  // for the real driver afterwards.
  if (!driver_present()) {
    const ScopedLibcuda unset(std::nullopt);
    std::string after;
    EXPECT_FALSE(Driver::available(&after));
    EXPECT_EQ(after.find("STUB"), std::string::npos) << after;
  }
}

// Error names and descriptions come from the driver (cuGetErrorName and
// cuGetErrorString): these tests load the recording fake driver, which
// answers for the codes it can return.
class CudaErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string fake = testing::fake_libcuda_path();
    ASSERT_TRUE(std::filesystem::exists(fake)) << fake;
    libcuda_.emplace(fake);
    std::string why;
    ASSERT_TRUE(Driver::available(&why)) << why;
  }
  std::optional<ScopedLibcuda> libcuda_;
};

TEST_F(CudaErrorTest, IllegalAddressIsStickyAndSaysSo) {
  const CudaError e(700, "cuStreamSynchronize");
  EXPECT_EQ(e.code(), 700);
  EXPECT_EQ(e.name(), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_TRUE(e.sticky());
  const std::string message = e.what();
  EXPECT_EQ(message.rfind("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (", 0), 0U) << message;
  EXPECT_TRUE(message.ends_with("); the CUDA context is now unusable: restart the process")) << message;
}

TEST_F(CudaErrorTest, InvalidValueIsNotSticky) {
  const CudaError e(1, "cuFuncSetAttribute");
  EXPECT_EQ(e.name(), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_FALSE(e.sticky());
  const std::string message = e.what();
  EXPECT_EQ(message.rfind("cuFuncSetAttribute failed: CUDA_ERROR_INVALID_VALUE (", 0), 0u) << message;
  EXPECT_EQ(message.find("unusable"), std::string::npos) << message;
}

TEST_F(CudaErrorTest, TheMessageIsTheDriversDescription) {
  const char* text = nullptr;
  using GetString = CUresult (*)(CUresult, const char**);
  void* library = dlopen(testing::fake_libcuda_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  const auto get_string = reinterpret_cast<GetString>(dlsym(library, "cuGetErrorString"));
  ASSERT_EQ(get_string(CUDA_ERROR_INVALID_PTX, &text), CUDA_SUCCESS);
  EXPECT_EQ(std::string(CudaError(218, "cuModuleLoadData").what()),
            "cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX (" + std::string(text) + ")");
  dlclose(library);
}

TEST_F(CudaErrorTest, AnUnknownCodeIsNamedByItsNumber) {
  EXPECT_EQ(error_name(12345), "CUDA error 12345");
  const CudaError e(12345, "cuLaunchKernel");
  EXPECT_EQ(e.name(), "CUDA error 12345");
  EXPECT_FALSE(e.sticky());
  EXPECT_STREQ(e.what(), "cuLaunchKernel failed: CUDA error 12345");
}

TEST(CudaErrorNamesTest, WithoutADriverACodeIsNamedByItsNumber) {
  if (driver_present()) GTEST_SKIP() << "a CUDA driver is present";
  const ScopedLibcuda unset(std::nullopt);
  EXPECT_EQ(error_name(719), "CUDA error 719");
}

TEST(CudaErrorNamesTest, ErrorsThatPoisonTheContextAreSticky) {
  // ECC uncorrectable, launch timeout, device assert, hardware stack error,
  // illegal instruction, misaligned address, invalid PC, launch failed.
  for (const int code : {214, 702, 710, 714, 715, 716, 718, 719}) {
    EXPECT_TRUE(is_sticky_error(code)) << code;
    EXPECT_NE(std::string(CudaError(code, "op").what()).find("restart the process"), std::string::npos);
  }
  // Out of memory, no binary for the GPU, invalid PTX, out of resources,
  // not found: the context stays usable.
  for (const int code : {2, 209, 218, 701, 500}) EXPECT_FALSE(is_sticky_error(code)) << code;
}

DeviceInfo device(std::string name, int major, int minor, int sms) {
  DeviceInfo d;
  d.name = std::move(name);
  d.compute_major = major;
  d.compute_minor = minor;
  d.sm_count = sms;
  return d;
}

TEST(DeviceInfoTest, ArchIsTheTargetToCompileFor) {
  EXPECT_EQ(device("NVIDIA A100-SXM4-80GB", 8, 0, 108).arch(), "sm_80");
  EXPECT_EQ(device("NVIDIA A10", 8, 6, 72).arch(), "sm_86");
  EXPECT_EQ(device("NVIDIA L4", 8, 9, 58).arch(), "sm_89");
  EXPECT_EQ(device("NVIDIA H200", 9, 0, 132).arch(), "sm_90a");
  EXPECT_EQ(device("NVIDIA B200", 10, 0, 148).arch(), "sm_100a");
  EXPECT_EQ(device("NVIDIA GeForce RTX 5090", 12, 0, 170).arch(), "sm_120");
}

TEST(DeviceInfoTest, TheVariantGeneratorKnowsEveryArch) {
  const std::vector<std::pair<int, int>> capabilities = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}};
  for (const auto& [major, minor] : capabilities) {
    const std::string arch = device("gpu", major, minor, 1).arch();
    EXPECT_TRUE(parse_arch(arch).has_value()) << arch << " is not in " << known_archs();
  }
}

TEST(DeviceInfoTest, KeyHoldsComputeCapabilityAndSmCount) {
  EXPECT_EQ(device("NVIDIA H200", 9, 0, 132).key(), "NVIDIA H200/cc9.0/sm132");
  // One name, two parts: the key tells them apart.
  EXPECT_NE(device("NVIDIA H100", 9, 0, 114).key(), device("NVIDIA H100", 9, 0, 132).key());
}

// ---------------------------------------------------------------------------
// GPU tests: skipped with the driver's reason where there is none.

constexpr const char* kKernels = R"(
struct FillParams {
  float* out;
  float scale;
  int n;
};

template <int kOffset>
__global__ void fill(FillParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = p.scale * i + kOffset;
}

struct SharedParams {
  unsigned long long* out;
  int words;
};

// Fills `words` of dynamic shared memory, then sums them on one thread.
__global__ void shared_sum(SharedParams p) {
  extern __shared__ unsigned words[];
  for (int i = threadIdx.x; i < p.words; i += blockDim.x) words[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    for (int i = 0; i < p.words; ++i) sum += words[i];
    *p.out = sum;
  }
}
)";

// Host twins of the kernels' params structs.
struct FillParams {
  float* out;
  float scale;
  int n;
};
struct SharedParams {
  unsigned long long* out;
  int words;
};

class CudaDriverGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Driver::available(&why)) GTEST_SKIP() << why;
    driver_ = &Driver::get();
    const std::vector<DeviceInfo> devices = driver_->devices();
    if (devices.empty()) GTEST_SKIP() << "the CUDA driver sees no device";
    device_ = devices.front();
  }

  Driver::Function compile(const char* name_expression) {
    const CompileResult compiled = compile_with_nvrtc(kKernels, "cuda_driver_test.cu", name_expression, device_.arch());
    EXPECT_TRUE(compiled.ok) << compiled.log;
    if (!compiled.ok) return {};
    module_ = driver_->load_module(device_.ordinal, compiled.cubin);
    return driver_->function(module_, compiled.lowered_name);
  }

  void TearDown() override {
    if (driver_ != nullptr && module_.handle != nullptr) driver_->unload_module(module_);
  }

  Driver* driver_ = nullptr;
  DeviceInfo device_;
  Driver::Module module_;
};

TEST_F(CudaDriverGpuTest, ListsDevices) {
  EXPECT_GE(driver_->version(), 11000);
  for (const DeviceInfo& d : driver_->devices()) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.compute_major, 8) << d.key();
    EXPECT_GT(d.sm_count, 0) << d.key();
    EXPECT_GT(d.max_shared_per_block_optin, 48 * 1024) << d.key();
    EXPECT_GT(d.l2_bytes, 0) << d.key();
    EXPECT_GT(d.total_memory, 0u) << d.key();
    std::cout << d.ordinal << ": " << d.key() << " " << d.arch() << "\n";
  }
}

TEST_F(CudaDriverGpuTest, CopiesMemoryBothWays) {
  std::vector<std::uint32_t> host(1 << 18);
  std::iota(host.begin(), host.end(), 7u);
  const std::size_t bytes = host.size() * sizeof(std::uint32_t);
  void* device_ptr = driver_->allocate(device_.ordinal, bytes);
  driver_->copy_to_device(device_ptr, host.data(), bytes);
  std::vector<std::uint32_t> back(host.size(), 0);
  driver_->copy_to_host(back.data(), device_ptr, bytes);
  driver_->release(device_ptr);
  EXPECT_EQ(back, host);
}

TEST_F(CudaDriverGpuTest, LaunchesAKernelCompiledWithNvrtc) {
  const Driver::Function fill = compile("fill<3>");
  ASSERT_NE(fill.handle, nullptr);
  constexpr int kCapacity = 256;
  constexpr int kN = 250;  // the last block is partial
  std::vector<float> host(kCapacity, -1.0f);
  void* out = driver_->allocate(device_.ordinal, kCapacity * sizeof(float));
  driver_->copy_to_device(out, host.data(), kCapacity * sizeof(float));
  const FillParams params{static_cast<float*>(out), /*scale=*/0.5f, /*n=*/kN};
  const LaunchConfig config{.grid = {4, 1, 1}, .block = {64, 1, 1}};
  const float ms = driver_->time_ms(nullptr, [&] { driver_->launch(fill, config, &params, sizeof(params), nullptr); });
  driver_->synchronize(nullptr);
  driver_->copy_to_host(host.data(), out, kCapacity * sizeof(float));
  driver_->release(out);
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  for (int i = 0; i < kCapacity; ++i) {
    EXPECT_EQ(host[i], i < kN ? 0.5f * static_cast<float>(i) + 3.0f : -1.0f) << "at " << i;
  }
}

TEST_F(CudaDriverGpuTest, DynamicSharedMemoryAbove48KiBNeedsTheAttribute) {
  const Driver::Function sum = compile("shared_sum");
  ASSERT_NE(sum.handle, nullptr);
  constexpr int kWords = 16 * 1024;  // 64 KiB
  void* out = driver_->allocate(device_.ordinal, sizeof(unsigned long long));
  const SharedParams params{static_cast<unsigned long long*>(out), kWords};
  const LaunchConfig config{.grid = {1, 1, 1}, .block = {256, 1, 1}, .dynamic_shared_bytes = kWords * 4};
  try {
    driver_->launch(sum, config, &params, sizeof(params), nullptr);
    ADD_FAILURE() << "a 64 KiB launch succeeded without the opt-in attribute";
  } catch (const CudaError& e) {
    EXPECT_FALSE(e.sticky()) << e.what();
  }
  driver_->set_max_dynamic_shared(sum, kWords * 4);
  driver_->launch(sum, config, &params, sizeof(params), nullptr);
  driver_->synchronize(nullptr);
  unsigned long long result = 0;
  driver_->copy_to_host(&result, out, sizeof(result));
  driver_->release(out);
  EXPECT_EQ(result, static_cast<unsigned long long>(kWords) * (kWords - 1) / 2);
}

TEST_F(CudaDriverGpuTest, AParamsStructOfTheWrongSizeIsRejected) {
  if (driver_->version() < 12040) GTEST_SKIP() << "the driver cannot report kernel parameter sizes";
  const Driver::Function fill = compile("fill<0>");
  ASSERT_NE(fill.handle, nullptr);
  const std::vector<char> bigger(sizeof(FillParams) + 8, 0);
  EXPECT_THROW(driver_->launch(fill, LaunchConfig{}, bigger.data(), bigger.size(), nullptr), InvalidArgument);
}

// With lazy loading (CUDA's default since 12.2) the driver may accept the
// bytes at load and refuse them at the first lookup (seen on an H200 with
// driver 580): either way it is a CUDA error, not sticky, before any launch.
TEST_F(CudaDriverGpuTest, AModuleThatIsNotACubinIsACudaError) {
  const std::string garbage = "not a cubin";
  try {
    const Driver::Module module = driver_->load_module(device_.ordinal, garbage);
    driver_->function(module, "kernel");
    FAIL() << "loaded garbage as a module and looked a kernel up in it";
  } catch (const CudaError& e) {
    EXPECT_FALSE(e.sticky()) << e.what();
    const std::string what = e.what();
    EXPECT_TRUE(what.rfind("cuLibraryLoadData failed: CUDA_ERROR_", 0) == 0 ||
                what.rfind("cuLibraryGetKernel(kernel) failed: CUDA_ERROR_", 0) == 0)
        << what;
  }
}

// A sticky error loses the context for the process: every later call fails
// at once with the first error's message and never reaches the driver. Each
// test runs in its own process (gtest_discover_tests), as these poison it.
class LostContextTest : public CudaErrorTest {
 protected:
  void SetUp() override {
    CudaErrorTest::SetUp();
    ASSERT_TRUE(fake_.loaded());
    fake_.reset();
  }
  // Launches a do-nothing function of the fake whose launch fails with `code`.
  std::string launch_failing(Driver& driver, int code) const {
    const std::vector<char> image(16, 'x');  // the fake loads anything
    const Driver::Module module = driver.load_module(0, image);
    const Driver::Function function = driver.function(module, "kernel");
    fake_.fail("cuLaunchKernel", 1, code);
    try {
      driver.launch(function, {.grid = {1, 1, 1}, .block = {32, 1, 1}}, nullptr, 0, nullptr);
    } catch (const CudaError& e) {
      return e.what();
    }
    ADD_FAILURE() << "the injected launch failure was not thrown";
    return "";
  }
  testing::FakeDriver fake_;
};

TEST_F(LostContextTest, LaterCallsFailFastWithTheFirstStickyError) {
  Driver& driver = Driver::get();
  void* buffer = driver.allocate(0, 256);
  ASSERT_EQ(driver.lost_context(), nullptr);
  const std::string first = launch_failing(driver, CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_NE(driver.lost_context(), nullptr);
  EXPECT_EQ(std::string(driver.lost_context()->what()), first);
  const long allocs = fake_.count("cuMemAlloc_v2");
  const long syncs = fake_.count("cuStreamSynchronize");
  const auto same_error = [&](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " succeeded on a lost context";
    } catch (const CudaError& e) {
      EXPECT_EQ(std::string(e.what()), first) << what;
      EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS) << what;
      EXPECT_TRUE(e.sticky()) << what;
    }
  };
  same_error([&] { driver.allocate(0, 64); }, "allocate");
  same_error([&] { driver.synchronize(nullptr); }, "synchronize");
  same_error([&] { driver.copy_to_device(buffer, first.data(), 8); }, "copy_to_device");
  same_error([&] { driver.check_usable(); }, "check_usable");
  EXPECT_EQ(fake_.count("cuMemAlloc_v2"), allocs) << "a call reached the driver after the context was lost";
  EXPECT_EQ(fake_.count("cuStreamSynchronize"), syncs) << "a call reached the driver after the context was lost";
}

TEST_F(LostContextTest, ANonStickyErrorLeavesTheContextUsable) {
  Driver& driver = Driver::get();
  const std::string first = launch_failing(driver, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  EXPECT_NE(first.find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos) << first;
  EXPECT_EQ(driver.lost_context(), nullptr);
  void* buffer = driver.allocate(0, 64);
  EXPECT_NE(buffer, nullptr);
  driver.release(buffer);
}

// A cluster shape is a launch attribute: such a launch goes through
// cuLaunchKernelEx with it (the fake records the cluster it was given);
// one that does not divide the grid is refused before the driver.
TEST_F(LostContextTest, AClusterLaunchGoesThroughLaunchKernelExWithItsShape) {
  Driver& driver = Driver::get();
  const std::vector<char> image(16, 'x');
  const Driver::Function function = driver.function(driver.load_module(0, image), "kernel");
  const long plain = fake_.count("cuLaunchKernel");
  driver.launch(function, {.grid = {4, 1, 1}, .block = {384, 1, 1}, .cluster = {2, 1, 1}}, nullptr, 0, nullptr);
  EXPECT_EQ(fake_.count("cuLaunchKernelEx"), 1);
  EXPECT_EQ(fake_.count("cuLaunchKernel"), plain);
  unsigned grid[3] = {}, block[3] = {}, shared = 0;
  fake_.last_launch(grid, block, &shared);
  EXPECT_EQ(grid[0], 4U);
  EXPECT_EQ(block[0], 384U);
  driver.launch(function, {.grid = {4, 1, 1}, .block = {384, 1, 1}}, nullptr, 0, nullptr);
  EXPECT_EQ(fake_.count("cuLaunchKernel"), plain + 1);  // no cluster: the plain launch
  try {
    driver.launch(function, {.grid = {3, 1, 1}, .block = {384, 1, 1}, .cluster = {2, 1, 1}}, nullptr, 0, nullptr);
    ADD_FAILURE() << "a cluster of 2 over a grid of 3 was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("divide the grid"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake_.count("cuLaunchKernelEx"), 1);
}

TEST_F(LostContextTest, TheRuntimeFailsFastBeforeCompiling) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("attune_lost_context_" + std::to_string(::getpid()));
  std::filesystem::remove_all(cache);
  Driver& driver = Driver::get();
  Runtime runtime({.backend = Backend::kCuda, .cache_directory = cache});
  const std::vector<std::int64_t> shape = {1, 16, 1, 64};
  const AttentionProblem problem = make_problem(shape, shape, shape, {.dtype = DType::kBF16});
  const DeviceBuffers d(driver, {{nullptr, 4096}, {nullptr, 4096}, {nullptr, 4096}, {nullptr, 4096}, {nullptr, 64}});
  const std::string first = launch_failing(driver, CUDA_ERROR_LAUNCH_FAILED);
  try {
    runtime.forward(problem, {d.at(0), d.at(1), d.at(2), d.at(3), static_cast<float*>(d.at(4))});
    ADD_FAILURE() << "forward succeeded on a lost context";
  } catch (const CudaError& e) {
    EXPECT_EQ(std::string(e.what()), first);
  }
  // Nothing was compiled (an NVRTC compile takes seconds) nor loaded.
  EXPECT_TRUE(std::filesystem::is_empty(cache)) << "the runtime compiled before failing";
  EXPECT_EQ(fake_.count("cuLibraryLoadData"), 1);  // launch_failing's own
  std::filesystem::remove_all(cache);
}

// A kernel compiled with a wait bound (ATTUNE_WAIT_BOUND_MS) reports through
// the module global "attune_wait_report", which the driver points at
// host-mapped memory when it looks the kernel up; the fake stands in for the
// kernel by writing the report there, then the launch's sync fails sticky.
TEST_F(LostContextTest, AWaitThatGaveUpIsNamedInTheStickyErrorAndByWaitReport) {
  const testing::EnvGuard bound({"ATTUNE_WAIT_BOUND_MS"});
  testing::EnvGuard::set("ATTUNE_WAIT_BOUND_MS", "50");
  Driver& driver = Driver::get();
  EXPECT_EQ(wait_report(), "");
  const std::vector<char> image(16, 'x');
  const Driver::Function function = driver.function(driver.load_module(0, image), "kernel");
  ASSERT_EQ(fake_.count("cuLibraryGetGlobal"), 2) << "the bounds report's slot, then the wait report's";
  auto* global = static_cast<WaitReport**>(fake_.global("attune_wait_report"));
  ASSERT_NE(global, nullptr);
  WaitReport* report = *global;
  ASSERT_NE(report, nullptr) << "the global was not pointed at the report";
  EXPECT_EQ(report->magic, 0U);
  EXPECT_EQ(wait_report(), "") << "an empty report is no report";
  // What give_up() in hopper_cuda.h writes.
  report->claimed = 1;
  report->block[0] = 3;
  report->block[1] = 1;
  report->thread = 130;
  report->barrier = 0x400;
  report->parity = 1;
  report->state = 2;  // parity 1 complete, parity 0 not
  report->waited_ns = 50'100'000;
  report->bound_ms = 50;
  report->magic = kWaitReportMagic;
  driver.launch(function, {.grid = {1, 1, 1}, .block = {32, 1, 1}}, nullptr, 0, nullptr);
  fake_.fail("cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
  try {
    driver.synchronize(nullptr);
    ADD_FAILURE() << "the injected failure was not thrown";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    for (const char* part :
         {"CUDA_ERROR_LAUNCH_FAILED", "mbarrier wait gave up after 50.1 ms (bound 50 ms)", "block (3, 1, 0)",
          "thread 130 (warp 4, lane 2)", "barrier at shared 0x400", "waiting for parity 1",
          "then parity 0 not complete, parity 1 complete", "restart the process"}) {
      EXPECT_NE(what.find(part), std::string::npos) << "no '" << part << "' in: " << what;
    }
  }
  EXPECT_NE(wait_report().find("block (3, 1, 0)"), std::string::npos) << wait_report();
}

TEST_F(LostContextTest, WithoutAWaitBoundOnlyTheBoundsReportIsInstalled) {
  const testing::EnvGuard bound({"ATTUNE_WAIT_BOUND_MS"});
  testing::EnvGuard::set("ATTUNE_WAIT_BOUND_MS", std::nullopt);
  Driver& driver = Driver::get();
  const std::vector<char> image(16, 'x');
  driver.function(driver.load_module(0, image), "kernel");
  EXPECT_EQ(fake_.count("cuLibraryGetGlobal"), 1) << "the bounds report's slot only";
  EXPECT_EQ(fake_.global("attune_wait_report"), nullptr);
  EXPECT_NE(fake_.global("attune_bounds_report"), nullptr);
}

// A kernel that clamps a length or page it read from device memory writes a
// BoundsReport through the slot (templates/primitives/cuda.h); the fake
// stands in for it. The host reads it without a sync, and a clear starts a
// new generation (the kernel's claim compares against it).
TEST_F(LostContextTest, AClampedPageReachesBoundsReportUntilCleared) {
  Driver& driver = Driver::get();
  const std::vector<char> image(16, 'x');
  driver.function(driver.load_module(0, image), "kernel");
  auto* global = static_cast<BoundsReport**>(fake_.global("attune_bounds_report"));
  ASSERT_NE(global, nullptr);
  BoundsReport* report = *global;
  ASSERT_NE(report, nullptr) << "the slot was not pointed at the report";
  EXPECT_EQ(bounds_report(), "");
  const u32 generation = report->generation;
  report->kind = kBoundsPage;
  report->batch = 1;
  report->index = 2;
  report->value = 48;
  report->limit = 8;
  report->magic = kBoundsReportMagic;
  EXPECT_EQ(bounds_report(),
            "a run read block_table[1, 2] = 48, outside the page pool of 8 pages: the kernel read page 0 instead, so "
            "that run's output is wrong");
  clear_bounds_report();
  EXPECT_EQ(bounds_report(), "");
  EXPECT_EQ(report->generation, generation + 1);
}

// TMA tensor maps come from the driver's cuTensorMapEncodeTiled, after the
// same check the emulator applies: the fake writes back what it was given.
class TensorMapDriverTest : public CudaErrorTest {
 protected:
  void SetUp() override {
    CudaErrorTest::SetUp();
    ASSERT_TRUE(fake_.loaded());
    fake_.reset();
  }
  testing::FakeDriver fake_;
};

TEST_F(TensorMapDriverTest, TheDriverEncodesTheMapAfterAttunesCheck) {
  alignas(16) static unsigned char tensor[4096];
  TensorMapSpec spec = testing::swizzled_tile_map(tensor, 32, 16);
  const TensorMap map = Driver::get().encode_tensor_map(spec);
  EXPECT_EQ(fake_.count("cuTensorMapEncodeTiled"), 1);
  EXPECT_EQ(map.words[0], reinterpret_cast<std::uintptr_t>(tensor));
  EXPECT_EQ(map.words[1], 2U);
  EXPECT_EQ(map.words[2], static_cast<u64>(CU_TENSOR_MAP_DATA_TYPE_UINT16));
  EXPECT_EQ(map.words[3], static_cast<u64>(CU_TENSOR_MAP_SWIZZLE_128B));
  EXPECT_EQ(map.words[4], 64U);
  EXPECT_EQ(map.words[5], 32U);
  EXPECT_EQ(map.words[9], 64U);
  EXPECT_EQ(map.words[10], 16U);
  EXPECT_EQ(map.words[14], 128U);
  spec.box[0] = 128;  // 256 bytes: wider than the 128-byte swizzle
  try {
    (void)Driver::get().encode_tensor_map(spec);
    ADD_FAILURE() << "a box wider than its swizzle was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor map box[0]: got 256 bytes with the 128-byte swizzle"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fake_.count("cuTensorMapEncodeTiled"), 1) << "refused before the driver";
}

}  // namespace
}  // namespace attune::cuda
