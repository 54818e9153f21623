// The driver calls of planned runs, counted on the recording fake driver
// (ATTUNE_LIBCUDA; NVRTC compiles for real at plan time, the fake loads
// anything and runs nothing): after a plan, every repeated run of every op
// launches its kernels and makes no other driver call (no allocation, free,
// copy, synchronization, module load or context query) when it runs on a
// stream; it is safe inside a CUDA graph capture, keeps the caller's
// context, and turns injected driver errors into typed errors.
#include <cuda.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/flash_fwd_params.h"
#include "runtime/runtime.h"
#include "tests/support/error_of.h"
#include "tests/support/fake_driver.h"

namespace attune {
namespace {

using testing::error_of;

// The calls a repeated run must never make.
constexpr const char* kForbidden[] = {"cuMemAlloc_v2",       "cuMemFree_v2",        "cuMemcpyHtoD_v2",
                                      "cuMemcpyDtoH_v2",     "cuStreamSynchronize", "cuLibraryLoadData",
                                      "cuKernelGetFunction", "cuEventSynchronize",  "cuCtxGetCurrent",
                                      "cuCtxSetCurrent",     "cuStreamIsCapturing"};

// Small variants, so the plans compile quickly.
constexpr const char* kForward = "flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0";
constexpr const char* kDecode = "flash_decode/d64.bm16.bn64.wn1.st2.pk1";
constexpr const char* kBackward = "flash_bwd/d64.bm64.bn64.wm2.wn2.st2.at1";

std::filesystem::path cache_directory() {
  const char* dir = std::getenv("ATTUNE_TEST_KERNEL_CACHE");
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::temp_directory_path() / "attune_census_cache";
}

class PlanCensusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_.loaded()) GTEST_SKIP() << "the fake driver is not built at " << testing::fake_libcuda_path();
    if (std::getenv("ATTUNE_LIBCUDA") == nullptr) GTEST_SKIP() << "ATTUNE_LIBCUDA does not name the fake driver";
    fake_.reset();
    runtime_ =
        std::make_unique<Runtime>(RuntimeOptions{.backend = Backend::kCuda, .cache_directory = cache_directory()});
    stream_ = cuda::Driver::get().create_stream(0);
  }

  // Device memory of the fake (host memory), freed with the test.
  template <class T = void>
  T* allocate(std::size_t bytes) {
    void* p = cuda::Driver::get().allocate(0, std::max<std::size_t>(bytes, 16));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  void TearDown() override {
    if (stream_ != nullptr) cuda::Driver::get().destroy_stream(stream_);
    try {
      for (void* p : owned_) cuda::Driver::get().release(p);
    } catch (const cuda::CudaError&) {
      // A lost context (the sticky-error test) frees nothing; the fake's
      // memory goes with the process.
    }
  }

  std::map<std::string, long> counts() const {
    std::map<std::string, long> out;
    for (const char* name : kForbidden) out[name] = fake_.count(name);
    out["cuLaunchKernel"] = fake_.count("cuLaunchKernel");
    out["cuMemsetD32Async"] = fake_.count("cuMemsetD32Async");
    out["every call"] = fake_.total();
    return out;
  }

  // Runs `run` once to warm up, then `times` more, and checks the census:
  // `kernels` launches and `memsets` memset nodes per run, nothing else.
  template <class Run>
  void expect_launches_only(const char* what, int kernels, const Run& run, int times = 5, int memsets = 0) {
    run();
    const std::map<std::string, long> before = counts();
    for (int i = 0; i < times; ++i) run();
    const std::map<std::string, long> after = counts();
    for (const char* name : kForbidden) {
      EXPECT_EQ(after.at(name) - before.at(name), 0) << what << ": " << name << " in repeated runs";
    }
    const long launches = static_cast<long>(kernels) * times;
    EXPECT_EQ(after.at("cuLaunchKernel") - before.at("cuLaunchKernel"), launches) << what;
    const long zeroed = static_cast<long>(memsets) * times;
    EXPECT_EQ(after.at("cuMemsetD32Async") - before.at("cuMemsetD32Async"), zeroed) << what;
    EXPECT_EQ(after.at("every call") - before.at("every call"), launches + zeroed)
        << what << ": calls besides the launches";
  }

  LaunchConfig last_launch() const {
    unsigned grid[3];
    unsigned block[3];
    unsigned shared = 0;
    fake_.last_launch(grid, block, &shared);
    return {.grid = {static_cast<i32>(grid[0]), static_cast<i32>(grid[1]), static_cast<i32>(grid[2])},
            .block = {static_cast<i32>(block[0]), static_cast<i32>(block[1]), static_cast<i32>(block[2])},
            .dynamic_shared_bytes = static_cast<int>(shared)};
  }

  AttentionBuffers forward_buffers(const AttentionProblem& p) {
    return {allocate(2 * static_cast<std::size_t>(q_extent(p))), allocate(2 * static_cast<std::size_t>(k_extent(p))),
            allocate(2 * static_cast<std::size_t>(v_extent(p))), allocate(2 * static_cast<std::size_t>(o_extent(p))),
            allocate<float>(4 * static_cast<std::size_t>(lse_extent(p)))};
  }

  // Device copies of the problem's length arrays.
  DeviceMetadata device_metadata(const AttentionProblem& p) {
    const auto copy = [&](const std::vector<std::int32_t>& host) -> const std::int32_t* {
      if (host.empty()) return nullptr;
      auto* d = allocate<std::int32_t>(host.size() * sizeof(std::int32_t));
      cuda::Driver::get().copy_to_device(d, host.data(), host.size() * sizeof(std::int32_t));
      return d;
    };
    return {copy(p.cu_seqlens_q), copy(p.cu_seqlens_k), copy(p.seqlens_k), copy(p.block_table)};
  }

  Workspace workspace(const Plan& plan) { return {allocate(plan.workspace_bytes()), plan.workspace_bytes()}; }

  testing::FakeDriver fake_;
  std::unique_ptr<Runtime> runtime_;
  void* stream_ = nullptr;  // the fake's; runs on it launch into its context
  std::vector<void*> owned_;
};

AttentionProblem dense_problem() {
  const std::vector<std::int64_t> shape = {2, 100, 4, 64};
  return make_problem(shape, shape, shape, {.mask = Mask::causal_bottom_right()});
}

AttentionProblem varlen_problem() {
  const std::vector<std::int64_t> q = {90, 4, 64};
  const std::vector<std::int64_t> k = {150, 2, 64};
  return make_problem(q, k, k, {.cu_seqlens_q = {0, 40, 41, 90}, .cu_seqlens_k = {0, 60, 61, 150}});
}

// Pages of 16: three sequences, up to 8 pages each, in a pool of 30.
AttentionProblem paged_problem(bool packed_queries) {
  std::vector<std::int32_t> table(3 * 8);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>((i * 7) % 30);
  const std::vector<std::int64_t> pool = {30, 16, 2, 64};
  ProblemOptions o{
      .mask = Mask::causal_bottom_right(), .seqlens_k = {128, 5, 77}, .block_table = table, .page_size = 16};
  if (!packed_queries) return make_problem(std::vector<std::int64_t>{3, 1, 4, 64}, pool, pool, o);
  o.cu_seqlens_q = {0, 1, 21, 26};  // decode, chunked prefill, decode
  return make_problem(std::vector<std::int64_t>{26, 4, 64}, pool, pool, o);
}

TEST_F(PlanCensusTest, RepeatedForwardRunsOnlyLaunch) {
  for (const AttentionProblem& p : {dense_problem(), varlen_problem()}) {
    const Plan plan = runtime_->plan_variant(parse_variant_id(kForward), p);
    const AttentionBuffers b = forward_buffers(p);
    const DeviceMetadata m = device_metadata(p);
    const Workspace w = workspace(plan);
    expect_launches_only(p.is_packed() ? "varlen forward" : "dense forward", 1,
                         [&] { runtime_->run(plan, b, m, w, stream_); });
    const LaunchConfig want = flash_fwd_launch(plan.problem(), plan.variant());
    const LaunchConfig got = last_launch();
    EXPECT_EQ(got.grid.x, want.grid.x);
    EXPECT_EQ(got.grid.y, 4);
    EXPECT_EQ(got.grid.z, p.batch);
    EXPECT_EQ(got.block.x, plan.variant().threads());
    EXPECT_EQ(got.dynamic_shared_bytes, plan.variant().shared_bytes());
  }
}

// The Hopper forward's dynamic tile scheduler: its counter, 16 bytes of the
// workspace, is zeroed by one memset node before each launch; the grid is
// at most one CTA per SM.
TEST_F(PlanCensusTest, RepeatedDynamicSchedulerForwardRunsAMemsetAndALaunch) {
  if (runtime_->arch().name != "sm_90a") GTEST_SKIP() << "the fake device is " << runtime_->arch().name;
  const AttentionProblem p = dense_problem();  // 1 m-block x 4 heads x 2 sequences: 8 tiles
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc2");
  const Plan plan = runtime_->plan_variant(v, p);
  EXPECT_EQ(plan.workspace_bytes(), 16U);
  const AttentionBuffers b = forward_buffers(p);
  const DeviceMetadata m = device_metadata(p);
  const Workspace w = workspace(plan);
  expect_launches_only(
      "dynamic scheduler forward", 1, [&] { runtime_->run(plan, b, m, w, stream_); }, 5, 1);
  EXPECT_EQ(last_launch().grid.x, 8);
  EXPECT_EQ(last_launch().grid.y, 1);
  const std::string missing = error_of([&] { runtime_->run(plan, b, m, {}, stream_); });
  EXPECT_NE(missing.find("workspace: got 0 bytes"), std::string::npos) << missing;
}

TEST_F(PlanCensusTest, RepeatedDecodeRunsOnlyLaunchWithSplitsAndVarlenOverPages) {
  for (const bool packed : {false, true}) {
    const AttentionProblem p = paged_problem(packed);
    const Plan plan = runtime_->plan_variant(parse_variant_id(kDecode), p, {.splits = 4});
    ASSERT_GT(plan.workspace_bytes(), 0U);
    const AttentionBuffers b = forward_buffers(p);
    const DeviceMetadata m = device_metadata(p);
    const Workspace w = workspace(plan);
    expect_launches_only(packed ? "varlen over paged" : "paged decode, 4 splits", 2,
                         [&] { runtime_->run(plan, b, m, w, stream_); });
    const LaunchConfig combine = flash_decode_combine_launch(plan.problem());
    EXPECT_EQ(last_launch().grid.x, combine.grid.x);
    // A fixed split size: the same census.
    const Plan fixed = runtime_->plan_variant(parse_variant_id(kDecode), p, {.split_size = 32});
    EXPECT_EQ(fixed.splits(), 2);  // 128 keys: splits of 32 keys round up to one 64-key tile each
    const Workspace fw = workspace(fixed);
    expect_launches_only("fixed split size", 2, [&] { runtime_->run(fixed, b, m, fw, stream_); });
  }
}

TEST_F(PlanCensusTest, RepeatedForwardRunsOverAPagedCacheOnlyLaunch) {
  // Chunked prefill: 130 query rows of one sequence reach the forward kernel.
  const AttentionProblem decode = paged_problem(true);
  const std::vector<std::int64_t> q = {136, 4, 64};
  const std::vector<std::int64_t> pool = {30, 16, 2, 64};
  const AttentionProblem p = make_problem(q, pool, pool,
                                          {.mask = Mask::causal_bottom_right(),
                                           .seqlens_k = decode.seqlens_k,
                                           .cu_seqlens_q = {0, 1, 131, 136},
                                           .block_table = decode.block_table,
                                           .page_size = 16});
  const Plan plan = runtime_->plan(p);
  ASSERT_EQ(plan.op(), Op::kForward) << plan.describe();
  const AttentionBuffers b = forward_buffers(p);
  const DeviceMetadata m = device_metadata(p);
  expect_launches_only("forward over a paged cache", 1, [&] { runtime_->run(plan, b, m, {}, stream_); });
  EXPECT_EQ(last_launch().grid.x, flash_fwd_launch(plan.problem(), plan.variant()).grid.x);
}

TEST_F(PlanCensusTest, RepeatedBackwardRunsOnlyLaunch) {
  const AttentionProblem p = varlen_problem();
  const Plan plan = runtime_->plan_variant(parse_variant_id(kBackward), p);
  const BackwardBuffers b{
      allocate(2 * static_cast<std::size_t>(q_extent(p))), allocate(2 * static_cast<std::size_t>(k_extent(p))),
      allocate(2 * static_cast<std::size_t>(v_extent(p))), allocate(2 * static_cast<std::size_t>(o_extent(p))),
      allocate(2 * static_cast<std::size_t>(o_extent(p))), allocate<float>(4 * static_cast<std::size_t>(lse_extent(p))),
      allocate(2 * static_cast<std::size_t>(q_extent(p))), allocate(2 * static_cast<std::size_t>(k_extent(p))),
      allocate(2 * static_cast<std::size_t>(v_extent(p)))};
  const DeviceMetadata m = device_metadata(p);
  const Workspace w = workspace(plan);
  expect_launches_only("backward", 3, [&] { runtime_->run_backward(plan, b, m, w, stream_); });
}

TEST_F(PlanCensusTest, RepeatedMergesOnlyLaunch) {
  const MergeProblem merge{.rows = 33, .heads = 4, .head_dim = 64, .parts = 3};
  std::vector<const void*> o;
  std::vector<const float*> lse;
  for (int i = 0; i < merge.parts; ++i) {
    o.push_back(allocate(2 * 33 * 4 * 64));
    lse.push_back(allocate<float>(4 * 33 * 4));
  }
  void* out = allocate(2 * 33 * 4 * 64);
  expect_launches_only("merge", 1, [&] { runtime_->merge_states(merge, o, lse, out, nullptr, stream_); });
  EXPECT_EQ(last_launch().grid.x, (33 * 4 + 3) / 4);
}

TEST_F(PlanCensusTest, ConvenienceCallsStillWorkAndSayWhatTheyCost) {
  // The convenience call of a varlen problem copies and synchronizes; its
  // plan's runs do not (the test above). Both give the same launches.
  const AttentionProblem p = varlen_problem();
  const AttentionBuffers b = forward_buffers(p);
  runtime_->forward_variant(parse_variant_id(kForward), p, b);
  const long syncs = fake_.count("cuStreamSynchronize");
  const long copies = fake_.count("cuMemcpyHtoD_v2");
  runtime_->forward_variant(parse_variant_id(kForward), p, b);
  EXPECT_EQ(fake_.count("cuStreamSynchronize") - syncs, 1);
  EXPECT_EQ(fake_.count("cuMemcpyHtoD_v2") - copies, 2);  // cu_seqlens_q and cu_seqlens_k
}

TEST_F(PlanCensusTest, InsideACaptureOnlyLoadedKernelsRunAndNothingCompiles) {
  const AttentionProblem dense = dense_problem();
  const AttentionProblem varlen = varlen_problem();
  const Plan plan = runtime_->plan_variant(parse_variant_id(kForward), varlen);
  const AttentionBuffers b = forward_buffers(varlen);
  const DeviceMetadata m = device_metadata(varlen);
  const AttentionBuffers db = forward_buffers(dense);
  runtime_->forward_variant(parse_variant_id(kForward), dense, db);  // loads the kernel uncaptured
  fake_.set_capturing(true);
  const long loads = fake_.count("cuLibraryLoadData");
  const long launches = fake_.count("cuLaunchKernel");
  runtime_->run(plan, b, m);                                         // captured: launches only
  runtime_->forward_variant(parse_variant_id(kForward), dense, db);  // loaded, nothing to copy: fine
  EXPECT_EQ(fake_.count("cuLaunchKernel") - launches, 2);
  // Host lengths need copies: refused, saying to plan first.
  EXPECT_NE(error_of([&] {
              runtime_->forward_variant(parse_variant_id(kForward), varlen, b);
            }).find("the stream is capturing a CUDA graph"),
            std::string::npos);
  // A kernel not loaded yet would compile inside the capture: refused.
  const std::string refused = error_of(
      [&] { runtime_->forward_variant(parse_variant_id("flash_fwd/d64.bm64.bn32.wm2.wn1.st1.qr0"), dense, db); });
  EXPECT_NE(refused.find("not loaded yet, and the stream is capturing"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Runtime::plan"), std::string::npos) << refused;
  EXPECT_EQ(fake_.count("cuLibraryLoadData"), loads);
  EXPECT_EQ(fake_.count("cuLaunchKernel") - launches, 2);
  fake_.set_capturing(false);
}

// The null stream is the current context's: a run on it asks which that
// is, once, and launches; nothing else.
TEST_F(PlanCensusTest, ARunOnTheNullStreamAsksForTheContextOnce) {
  const AttentionProblem p = dense_problem();
  const Plan plan = runtime_->plan_variant(parse_variant_id(kForward), p);
  const AttentionBuffers b = forward_buffers(p);
  runtime_->run(plan, b);
  const long total = fake_.total();
  const long queries = fake_.count("cuCtxGetCurrent");
  runtime_->run(plan, b);
  EXPECT_EQ(fake_.count("cuCtxGetCurrent") - queries, 1);
  EXPECT_EQ(fake_.total() - total, 2) << "one launch and one context query";
}

TEST_F(PlanCensusTest, TheCallersContextIsRestored) {
  using SetCurrent = CUresult (*)(CUcontext);
  using GetCurrent = CUresult (*)(CUcontext*);
  void* library = dlopen(testing::fake_libcuda_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  const auto set_current = reinterpret_cast<SetCurrent>(dlsym(library, "cuCtxSetCurrent"));
  const auto get_current = reinterpret_cast<GetCurrent>(dlsym(library, "cuCtxGetCurrent"));
  const AttentionProblem p = dense_problem();
  const Plan plan = runtime_->plan_variant(parse_variant_id(kForward), p);
  const AttentionBuffers b = forward_buffers(p);
  static unsigned char callers_context_tag = 0;
  auto* const callers = reinterpret_cast<CUcontext>(&callers_context_tag);
  for (void* stream : {static_cast<void*>(nullptr), stream_}) {
    for (const auto& call : std::vector<std::function<void()>>{
             [&] { runtime_->run(plan, b, {}, {}, stream); },
             [&] { runtime_->forward_variant(parse_variant_id(kForward), p, b, stream); },
             [&] { (void)runtime_->plan_variant(parse_variant_id(kForward), p); }}) {
      ASSERT_EQ(set_current(callers), CUDA_SUCCESS);
      const long launches = fake_.count("cuLaunchKernel");
      call();
      CUcontext now = nullptr;
      ASSERT_EQ(get_current(&now), CUDA_SUCCESS);
      EXPECT_EQ(now, callers) << "the call left another context current";
      EXPECT_LE(fake_.count("cuLaunchKernel") - launches, 1);
    }
  }
  // A run on a stream does not even look at the caller's context.
  const long switches = fake_.count("cuCtxSetCurrent") + fake_.count("cuCtxGetCurrent");
  runtime_->run(plan, b, {}, {}, stream_);
  EXPECT_EQ(fake_.count("cuCtxSetCurrent") + fake_.count("cuCtxGetCurrent"), switches);
  set_current(nullptr);
  dlclose(library);
}

TEST_F(PlanCensusTest, AnOutOfMemoryIsACudaErrorAndTheRuntimeGoesOn) {
  const AttentionProblem p = varlen_problem();
  const AttentionBuffers b = forward_buffers(p);
  fake_.fail("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  try {
    runtime_->forward_variant(parse_variant_id(kForward), p, b);
    ADD_FAILURE() << "the injected out-of-memory was not thrown";
  } catch (const cuda::CudaError& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_FALSE(e.sticky());
  }
  runtime_->forward_variant(parse_variant_id(kForward), p, b);  // usable again
}

// A sticky error loses the context for the process (this test's own).
TEST_F(PlanCensusTest, AStickyLaunchFailureMarksTheRuntimeUnusable) {
  const AttentionProblem p = dense_problem();
  const Plan plan = runtime_->plan_variant(parse_variant_id(kForward), p);
  const AttentionBuffers b = forward_buffers(p);
  fake_.fail("cuLaunchKernel", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
  const std::string first = error_of<cuda::CudaError>([&] { runtime_->run(plan, b); });
  EXPECT_NE(first.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << first;
  const long launches = fake_.count("cuLaunchKernel");
  EXPECT_EQ(error_of<cuda::CudaError>([&] { runtime_->run(plan, b); }), first);
  EXPECT_EQ(error_of<cuda::CudaError>([&] { (void)runtime_->plan_variant(parse_variant_id(kForward), p); }), first);
  EXPECT_EQ(fake_.count("cuLaunchKernel"), launches) << "a launch reached the driver after the context was lost";
}

}  // namespace
}  // namespace attune
