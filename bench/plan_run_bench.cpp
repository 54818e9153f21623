// Host time of a planned run (Runtime::run) through the recording fake
// driver (tests/fake_driver, selected with ATTUNE_LIBCUDA): what attune adds
// to each launch of a serving step, the fake's own bookkeeping included
// (a mutex and a map lookup per driver call). Plans compile for real with
// NVRTC once, before the timed loop.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/runtime.h"

namespace attune {
namespace {

Runtime& runtime() {
  static Runtime* r = [] {
    setenv("ATTUNE_LIBCUDA", ATTUNE_FAKE_LIBCUDA, 0);
    return new Runtime({.backend = Backend::kCuda});
  }();
  return *r;
}

void* device(std::size_t bytes) { return cuda::Driver::get().allocate(0, std::max<std::size_t>(bytes, 16)); }

struct Call {
  Plan plan;
  AttentionBuffers buffers;
  DeviceMetadata metadata;
  Workspace workspace;
};

Call prepare(const AttentionProblem& p, PlanOptions options = {}) {
  Call c{runtime().plan(p, Op::kForward, options), {}, {}, {}};
  c.buffers = {device(2 * static_cast<std::size_t>(q_extent(p))), device(2 * static_cast<std::size_t>(k_extent(p))),
               device(2 * static_cast<std::size_t>(v_extent(p))), device(2 * static_cast<std::size_t>(o_extent(p))),
               static_cast<float*>(device(4 * static_cast<std::size_t>(lse_extent(p))))};
  const auto copy = [](const std::vector<std::int32_t>& host) -> const std::int32_t* {
    if (host.empty()) return nullptr;
    void* d = device(host.size() * 4);
    cuda::Driver::get().copy_to_device(d, host.data(), host.size() * 4);
    return static_cast<const std::int32_t*>(d);
  };
  c.metadata = {copy(p.cu_seqlens_q), copy(p.cu_seqlens_k), copy(p.seqlens_k), copy(p.block_table)};
  c.workspace = {device(c.plan.workspace_bytes()), c.plan.workspace_bytes()};
  return c;
}

// The stream the runs go to, as a serving engine's are: a launch into its
// context is the run's only driver call.
void* stream() {
  static void* s = (runtime(), cuda::Driver::get().create_stream(0));
  return s;
}

void run_loop(benchmark::State& state, const Call& c) {
  for (auto _ : state) runtime().run(c.plan, c.buffers, c.metadata, c.workspace, stream());
  state.SetLabel(c.plan.describe().substr(0, 60));
}

// Llama-like prefill: one flash_fwd launch.
void planned_dense_forward(benchmark::State& state) {
  const std::vector<std::int64_t> q = {4, 2048, 32, 128};
  const std::vector<std::int64_t> kv = {4, 2048, 8, 128};
  static const Call kCall = prepare(make_problem(q, kv, kv, {.mask = Mask::causal_bottom_right()}));
  run_loop(state, kCall);
}
BENCHMARK(planned_dense_forward);

// `batch` sequences of 1000 cached keys in pages of 16 (64 pages each),
// 32 query heads on 8 KV heads of 128; packed queries when `cu` is given.
AttentionProblem paged(std::int64_t batch, const std::vector<std::int32_t>& cu = {}) {
  const std::int64_t pages = 64;
  std::vector<std::int32_t> table(static_cast<std::size_t>(batch * pages));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
  const std::vector<std::int64_t> pool = {batch * pages, 16, 8, 128};
  const std::vector<std::int64_t> q =
      cu.empty() ? std::vector<std::int64_t>{batch, 1, 32, 128} : std::vector<std::int64_t>{cu.back(), 32, 128};
  return make_problem(q, pool, pool,
                      {.mask = Mask::causal_bottom_right(),
                       .seqlens_k = std::vector<std::int32_t>(static_cast<std::size_t>(batch), 1000),
                       .cu_seqlens_q = cu,
                       .block_table = table,
                       .page_size = 16});
}

// A decode step: 64 sequences over a paged cache, 4 splits (decode + combine).
void planned_paged_decode_4_splits(benchmark::State& state) {
  static const Call kCall = prepare(paged(64), {.splits = 4});
  run_loop(state, kCall);
}
BENCHMARK(planned_paged_decode_4_splits);

// Mixed prefill and decode: packed queries (every fourth sequence a
// 256-row chunk, the rest one row) over the paged cache.
void planned_varlen_over_paged(benchmark::State& state) {
  std::vector<std::int32_t> cu = {0};
  for (std::int64_t b = 0; b < 16; ++b) cu.push_back(cu.back() + (b % 4 == 0 ? 256 : 1));
  static const Call kCall = prepare(paged(16, cu), {.splits = 2});
  run_loop(state, kCall);
}
BENCHMARK(planned_varlen_over_paged);

// The same batch without splits: its 256-row chunks send it to the forward
// kernel, which reads the pages itself (one launch).
void planned_chunked_prefill_over_paged(benchmark::State& state) {
  std::vector<std::int32_t> cu = {0};
  for (std::int64_t b = 0; b < 16; ++b) cu.push_back(cu.back() + (b % 4 == 0 ? 256 : 1));
  static const Call kCall = prepare(paged(16, cu));
  run_loop(state, kCall);
}
BENCHMARK(planned_chunked_prefill_over_paged);

}  // namespace
}  // namespace attune

BENCHMARK_MAIN();
