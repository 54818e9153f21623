// The tune-worker result line: one JSON object, read back exactly; other
// output is ignored, and a line that is not a complete result is no result.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "tuner/tuner.h"

namespace attune::tuner {
namespace {

TEST(WorkerProtocolTest, AResultRoundTripsOnOneLine) {
  Measurement m;
  m.ok = true;
  m.max_error = 0.001953125;
  m.median_ms = 1.0 / 3.0;
  m.spread_ms = 0.25;
  m.tflops = 123.456789;
  m.error = "line one\nline two";
  const std::string line = format_result(m);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const std::optional<Measurement> back = parse_result(line);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ok, m.ok);
  EXPECT_EQ(back->max_error, m.max_error);
  EXPECT_EQ(back->median_ms, m.median_ms);  // exactly: no digits lost
  EXPECT_EQ(back->spread_ms, m.spread_ms);
  EXPECT_EQ(back->tflops, m.tflops);
  EXPECT_EQ(back->error, m.error);
}

TEST(WorkerProtocolTest, AFailureWithoutNumbersRoundTrips) {
  Measurement m;
  m.error = "wrong result: max error 0.5";
  m.max_error = std::numeric_limits<double>::quiet_NaN();  // not a JSON number: read back as absent
  const std::optional<Measurement> back = parse_result(format_result(m));
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->ok);
  EXPECT_FALSE(back->median_ms);
  EXPECT_FALSE(back->max_error);
  EXPECT_EQ(back->error, m.error);
}

TEST(WorkerProtocolTest, OtherLinesAndBrokenResultsAreNoResult) {
  EXPECT_FALSE(parse_result("compiling flash_fwd/d64..."));
  EXPECT_FALSE(parse_result("{\"attune_result\": 1, \"ok\": true"));  // cut short
  EXPECT_FALSE(
      parse_result("{\"attune_result\": 2, \"ok\": false, \"max_error\": null, \"median_ms\": null, "
                   "\"spread_ms\": null, \"tflops\": null, \"error\": \"\"}"));  // another version
  EXPECT_FALSE(
      parse_result("{\"attune_result\": 1, \"ok\": true, \"max_error\": null, \"median_ms\": null, "
                   "\"spread_ms\": null, \"tflops\": null, \"error\": \"\"}"));  // ok without a time
  EXPECT_FALSE(parse_result("[1, 2]"));
}

// An isolated worker rebuilds the task's problem from these arguments:
// its score modifiers travel too, c and dropout's p with every digit.
TEST(WorkerProtocolTest, ArgumentsCarryTheModifiersAndTheirC) {
  const auto args_of = [](std::uint8_t bits, double softcap) {
    SweepSpec spec;
    spec.modifiers = {bits};
    spec.softcap = softcap;
    spec.max_variants = 1;
    const std::vector<Task> tasks = plan(spec, require_arch("sm_90a"));
    EXPECT_EQ(tasks.size(), 1U);
    return worker_arguments(tasks.front(), {}, {.executable = "attune"});
  };
  const auto value_of = [](const std::vector<std::string>& args, const std::string& flag) -> std::string {
    const auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? "(absent)" : *(it + 1);
  };
  const std::vector<std::string> plain = args_of(0, 30);
  EXPECT_EQ(value_of(plain, "--modifiers"), "none");
  EXPECT_EQ(value_of(plain, "--softcap"), "(absent)");
  const std::vector<std::string> all = args_of(kModAll, 1.0 / 3.0);
  EXPECT_EQ(value_of(all, "--modifiers"), "softcap+sinks+alibi");
  EXPECT_EQ(std::stod(value_of(all, "--softcap")), 1.0 / 3.0);
  EXPECT_NE(value_of(all, "--variant").find(".softcap1.sinks1.alibi1"), std::string::npos);
  EXPECT_EQ(value_of(all, "--dropout"), "(absent)");
  const std::vector<std::string> dropout = args_of(kModDropout, 30);
  EXPECT_EQ(value_of(dropout, "--modifiers"), "dropout");
  EXPECT_EQ(std::stod(value_of(dropout, "--dropout")), SweepSpec{}.dropout);
  EXPECT_TRUE(value_of(dropout, "--variant").ends_with(".dropout1")) << value_of(dropout, "--variant");
}

}  // namespace
}  // namespace attune::tuner
