// CPU-side costs of the runtime: dispatch on a memo hit, a disk-cache hit
// (read plus verification), a cold NVRTC compile of one forward variant, and
// compiling every variant of one problem class on 2 threads.
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <thread>

#include "runtime/dispatch/dispatcher.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/jit/nvrtc_compiler.h"

namespace attune {
namespace {

AttentionProblem llama_like() {
  return make_problem(std::vector<int64_t>{4, 2048, 32, 128}, std::vector<int64_t>{4, 2048, 8, 128},
                      std::vector<int64_t>{4, 2048, 8, 128},
                      {.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()});
}

void dispatch_memo_hit(benchmark::State& state) {
  Dispatcher dispatcher("bench-device", require_arch("sm_90a"), nullptr);
  const AttentionProblem problem = llama_like();
  dispatcher.choose(problem);  // warm the memo
  for (auto _ : state) benchmark::DoNotOptimize(&dispatcher.choose(problem));
}
BENCHMARK(dispatch_memo_hit);

std::filesystem::path scratch(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(::getpid()));
}

void disk_cache_hit(benchmark::State& state) {
  const auto dir = scratch("attune_bench_cache_");
  const CacheKey key{"hash", "flash_fwd/d128.bm64.bn32.wm4.wn1.st2", "bf16", "sm_90a", nvrtc_version(), "opts"};
  {
    KernelCache cache({.directory = dir});
    const std::vector<char> binary(static_cast<std::size_t>(state.range(0)), 'x');
    cache.store(key, binary);
  }
  for (auto _ : state) {
    KernelCache cache({.directory = dir, .memory = false});  // fresh process view: read and verify from disk
    benchmark::DoNotOptimize(cache.load(key));
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(disk_cache_hit)->Arg(64 << 10)->Arg(256 << 10)->Unit(benchmark::kMicrosecond);

void cold_compile_one_variant(benchmark::State& state) {
  const Variant variant = parse_variant_id("flash_fwd/d128.bm64.bn32.wm4.wn1.st2");
  for (auto _ : state) {
    const CompileResult r =
        compile_with_nvrtc(variant.kernel->source, "flash_fwd.cu", variant.name_expression(DType::kBF16), "sm_90a");
    if (!r.ok) state.SkipWithError(r.log.c_str());
  }
}
BENCHMARK(cold_compile_one_variant)->Unit(benchmark::kMillisecond)->Iterations(3);

void compile_problem_class_2_threads(benchmark::State& state) {
  const std::vector<Variant> variants = enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"));
  for (auto _ : state) {
    CompilerService service(nullptr, 2);
    std::vector<std::shared_future<CompilerService::Result>> futures;
    futures.reserve(variants.size());
    for (const Variant& v : variants) futures.push_back(service.compile({v, DType::kBF16, "sm_90a"}));
    for (auto& f : futures) benchmark::DoNotOptimize(f.get());
  }
  state.counters["variants"] = static_cast<double>(variants.size());
}
BENCHMARK(compile_problem_class_2_threads)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
}  // namespace attune

BENCHMARK_MAIN();
