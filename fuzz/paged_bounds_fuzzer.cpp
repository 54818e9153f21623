// Paged caches from arbitrary lengths, block tables and pool sizes, through
// both gates: the host check a call with host lengths gets (make_problem's
// validation), and the kernels' clamp a run with device lengths gets (a
// decode plan on the emulator, whose bug detectors report any read outside
// a buffer). Invariants: no run reads outside the pool, the table or the
// lengths, whatever they hold; and the host refuses exactly the inputs the
// kernel has to clamp (it reports them: attune::bounds_report).
//
// It needs the emulator's kernels, which the sanitizer build leaves out, so
// it is built in the main build with a standalone driver (fuzz/driver.h):
// CTest's fuzz.paged_bounds runs a few hundred seeded inputs; more with
// `build/ci/tests/runtime/paged_bounds_fuzzer --runs N --seed S`.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/problem.h"
#include "fuzz/fuzz_support.h"
#include "runtime/runtime.h"

using namespace attune;

namespace {

Runtime& runtime() {
  static Runtime* r = new Runtime({.backend = Backend::kEmu});  // lives as long as the process
  return *r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t page_size = int64_t{1} << in.ConsumeIntegralInRange<int>(0, 4);  // 1..16
  const int64_t max_pages = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t num_pages = in.ConsumeIntegralInRange<int64_t>(1, 8);
  const int64_t capacity = max_pages * page_size;
  std::vector<int32_t> lengths(static_cast<std::size_t>(batch));
  for (int32_t& n : lengths) {
    n = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-3, static_cast<int32_t>(capacity + 9))
                         : in.ConsumeIntegralInRange<int32_t>(0, static_cast<int32_t>(capacity));
  }
  std::vector<int32_t> table(static_cast<std::size_t>(batch * max_pages));
  for (int32_t& page : table) {
    page = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-2, static_cast<int32_t>(num_pages + 2))
                            : in.ConsumeIntegralInRange<int32_t>(0, static_cast<int32_t>(num_pages - 1));
  }
  const int splits = in.ConsumeIntegralInRange<int>(1, 3);
  const int64_t heads_q = 2;
  const int64_t heads_kv = 1;
  const int64_t dim = 32;

  const std::vector<int64_t> q_shape = {batch, 1, heads_q, dim};
  const std::vector<int64_t> pool_shape = {num_pages, page_size, heads_kv, dim};

  // Gate 1, the host: a call whose lengths and table are host arrays.
  bool accepted = true;
  try {
    make_problem(q_shape, pool_shape, pool_shape, {.seqlens_k = lengths, .block_table = table, .page_size = page_size});
  } catch (const InvalidArgument&) {
    accepted = false;
  }

  // Gate 2, the kernel: the same arrays passed to a plan's run as device
  // lengths (the emulator's memory is the host's). The plan is made for a
  // valid table of the same shape, as a server makes it once.
  std::vector<int32_t> planned_lengths(lengths.size(), 1);
  std::vector<int32_t> planned_table(table.size(), 0);
  const AttentionProblem p =
      make_problem(q_shape, pool_shape, pool_shape,
                   {.seqlens_k = planned_lengths, .block_table = planned_table, .page_size = page_size});
  AttentionProblem shape = device_lengths_of(p);
  shape.device_lengths->max_seqlen_k = capacity;
  const Plan plan = runtime().plan(shape, Op::kDecode, {.splits = splits});
  std::vector<std::uint16_t> q(static_cast<std::size_t>(batch * heads_q * dim), 0x3F80);  // 1.0 in bf16
  std::vector<std::uint16_t> k(static_cast<std::size_t>(num_pages * page_size * heads_kv * dim), 0x3F00);
  std::vector<std::uint16_t> v(k.size(), 0x3F80);
  std::vector<std::uint16_t> o(q.size());
  std::vector<float> lse(static_cast<std::size_t>(batch * heads_q));
  std::vector<float> workspace(plan.workspace_bytes() / sizeof(float) + 1);
  clear_bounds_report();
  try {
    runtime().run(plan, {q.data(), k.data(), v.data(), o.data(), lse.data()},
                  {.seqlens_k = lengths.data(), .block_table = table.data()},
                  {workspace.data(), plan.workspace_bytes()});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::check(false, "a run with device lengths failed (a read outside a buffer is a KernelFault)");
  }
  const bool reported = !bounds_report().empty();
  if (accepted == reported) {
    std::fprintf(stderr, "host %s, kernel %s: %s\n", accepted ? "accepted" : "refused",
                 reported ? "reported" : "reported nothing", bounds_report().c_str());
  }
  fuzz::check(accepted != reported, "the host refuses exactly what the kernel clamps");
  return 0;
}
