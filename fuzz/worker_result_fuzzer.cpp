// The tune worker's result line (tuner/tuner.h parse_result), which the
// parent reads from a process that may have crashed mid-write. Invariants:
// an accepted line formats back to a line that parses to the same result.
#include <string>

#include "fuzz/fuzz_support.h"
#include "tuner/tuner.h"

using namespace attune;

namespace {
bool same(const tuner::Measurement& a, const tuner::Measurement& b) {
  const auto eq = [](const std::optional<double>& x, const std::optional<double>& y) {
    return x.has_value() == y.has_value() && (!x || *x == *y || (*x != *x && *y != *y));
  };
  return a.ok == b.ok && a.error == b.error && eq(a.max_error, b.max_error) && eq(a.median_ms, b.median_ms) &&
         eq(a.spread_ms, b.spread_ms) && eq(a.tflops, b.tflops);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  std::optional<tuner::Measurement> m;
  try {
    m = tuner::parse_result(line);
  } catch (...) {
    fuzz::check(false, "parse_result threw (it returns nullopt for lines it refuses)");
  }
  if (!m) return 0;
  const std::string again = tuner::format_result(*m);
  fuzz::check(again.find('\n') == std::string::npos, "formatted result spans lines");
  const std::optional<tuner::Measurement> back = tuner::parse_result(again);
  fuzz::check(back.has_value() && same(*m, *back), "result round trip");
  return 0;
}
