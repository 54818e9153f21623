// Looking up the best variant: cold (open the database, read the device's
// best rows, resolve) and warm (an open database; then the dispatcher's memo).
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <filesystem>

#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/dispatch/dispatcher.h"
#include "tuning_db/tuning_db.h"

namespace attune {
namespace {

constexpr const char* kDevice = "NVIDIA H200/cc9.0/sm132";

// A database with `keys` tuned problem keys on one device.
std::filesystem::path populated(int keys) {
  auto path = std::filesystem::temp_directory_path() /
              ("attune_bench_db_" + std::to_string(::getpid()) + "_" + std::to_string(keys) + ".db");
  if (std::filesystem::exists(path)) return path;
  tuning_db::TuningDb db = tuning_db::TuningDb::open(path);
  const auto device = db.upsert_device({.key = kDevice, .name = "NVIDIA H200", .compute_major = 9, .sm_count = 132});
  const KernelSpec& kernel = kernel_for_op("fwd");
  const auto tmpl = db.upsert_template(kernel.name, kernel.source_hash);
  const auto variant = db.upsert_variant(tmpl, "flash_fwd/d128.bm64.bn32.wm4.wn1.st2");
  for (int i = 0; i < keys; ++i) {
    const int sq = 6 + i % 10;
    const int sk = 6 + (i / 10) % 10;
    const int bh = i / 100;
    const auto problem = db.upsert_problem({.key = {.dtype = DType::kBF16,
                                                    .head_dim_k = 128,
                                                    .head_dim_v = 128,
                                                    .seqlen_q_log2 = static_cast<std::int8_t>(sq),
                                                    .seqlen_k_log2 = static_cast<std::int8_t>(sk),
                                                    .batch_heads_log2 = static_cast<std::int8_t>(bh)},
                                            .seqlen_q = std::int64_t{1} << sq,
                                            .seqlen_k = std::int64_t{1} << sk,
                                            .batch = std::int64_t{1} << bh,
                                            .heads_q = 1,
                                            .heads_kv = 1});
    db.record_measurement(
        {.device = device, .problem = problem, .variant = variant, .ok = true, .median_ms = 1.0, .repetitions = 1});
  }
  return path;
}

AttentionProblem problem() {
  return make_problem(std::vector<int64_t>{4, 3000, 16, 128}, std::vector<int64_t>{4, 3000, 16, 128},
                      std::vector<int64_t>{4, 3000, 16, 128}, {.dtype = DType::kBF16});
}

void best_lookup_cold(benchmark::State& state) {
  const std::filesystem::path path = populated(static_cast<int>(state.range(0)));
  const AttentionProblem p = problem();
  for (auto _ : state) {
    const tuning_db::TuningDb db = tuning_db::TuningDb::open(path);
    const DbTunedSource tuned(db);
    const Dispatcher dispatcher(kDevice, require_arch("sm_90a"), &tuned);
    benchmark::DoNotOptimize(dispatcher.resolve(p));
  }
}
BENCHMARK(best_lookup_cold)->Arg(100)->Arg(500)->Unit(benchmark::kMicrosecond);

void best_lookup_warm(benchmark::State& state) {
  const auto path = populated(static_cast<int>(state.range(0)));
  const tuning_db::TuningDb db = tuning_db::TuningDb::open(path);
  const DbTunedSource tuned(db);
  const Dispatcher dispatcher(kDevice, require_arch("sm_90a"), &tuned);
  const AttentionProblem p = problem();
  for (auto _ : state) benchmark::DoNotOptimize(dispatcher.resolve(p));
}
BENCHMARK(best_lookup_warm)->Arg(100)->Arg(500)->Unit(benchmark::kMicrosecond);

void best_lookup_memo(benchmark::State& state) {
  const auto path = populated(500);
  const tuning_db::TuningDb db = tuning_db::TuningDb::open(path);
  const DbTunedSource tuned(db);
  Dispatcher dispatcher(kDevice, require_arch("sm_90a"), &tuned);
  const AttentionProblem p = problem();
  dispatcher.choose(p);
  for (auto _ : state) benchmark::DoNotOptimize(&dispatcher.choose(p));
}
BENCHMARK(best_lookup_memo);

}  // namespace
}  // namespace attune

BENCHMARK_MAIN();
