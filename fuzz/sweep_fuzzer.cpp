// Sweep files (attune tune --sweep FILE, tuner/sweep.h) from arbitrary text.
// Invariants: an accepted sweep has sane axes, and every task its plan makes
// is a problem the contract accepts with a variant valid for it.
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/parsed_input.h"
#include "tuner/sweep.h"

using namespace attune;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<tuner::SweepSpec> parsed = fuzz::parse_input_file(data, size, tuner::read_sweep_file);
  if (!parsed) return 0;
  tuner::SweepSpec& spec = *parsed;
  fuzz::check(!spec.dtypes.empty() && !spec.head_dims.empty() && !spec.masks.empty() && !spec.seqlens.empty() &&
                  !spec.batch_heads.empty() && !spec.queries.empty() && !spec.splits.empty(),
              "an empty axis was accepted");
  for (int d : spec.head_dims) fuzz::check(d >= 1 && d <= 256, "head dim out of 1..256");
  for (int64_t s : spec.seqlens) fuzz::check(s >= 1, "sequence length < 1");
  for (auto [b, h] : spec.batch_heads) fuzz::check(b >= 1 && h >= 1, "batch or heads < 1");
  fuzz::check(spec.max_variants >= 0, "negative max_variants");
  // Plan small sweeps in full (two variants per problem, short sequences).
  const std::size_t problems = spec.dtypes.size() * spec.head_dims.size() * spec.masks.size() * spec.seqlens.size() *
                               spec.batch_heads.size() * spec.queries.size();
  const bool small = problems <= 16 &&
                     std::all_of(spec.seqlens.begin(), spec.seqlens.end(), [](int64_t s) { return s <= 4096; }) &&
                     std::all_of(spec.batch_heads.begin(), spec.batch_heads.end(),
                                 [](auto bh) { return bh.first <= 4096 / bh.second; });
  if (!small) return 0;
  spec.max_variants = 2;
  std::vector<tuner::Task> tasks;
  try {
    tasks = tuner::plan(spec, require_arch("sm_90a"));
  } catch (const InvalidArgument&) {
    return 0;  // e.g. a combination no variant serves, refused with a message
  }
  for (const tuner::Task& t : tasks) {
    validate(t.problem);
    fuzz::check(t.variant.kernel != nullptr && t.variant.kernel->valid(t.variant.values), "invalid variant planned");
  }
  return 0;
}
