// The HTML report on databases built by hand: escaping, an empty database,
// the gain over the heuristic default, and the caps on charts and bars.
// tests/cli/report_test.py renders a real page in Chromium.
#include "tuner/report.h"
#include "runtime/dispatch/heuristics.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <random>

#include "generator/variants.h"
#include "runtime/runtime.h"

namespace attune::tuner {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// A fresh database in its own directory, removed afterwards.
class ReportTest : public ::testing::Test {
 protected:
  ReportTest()
      : dir_(fs::temp_directory_path() /
             ("attune_report_test_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()))),
        db_(tuning_db::TuningDb::open(dir_ / "tuning.db")) {
    device_ = db_.upsert_device({.key = "NVIDIA H200/cc9.0/sm132", .name = "NVIDIA H200", .compute_major = 9});
    template_ = db_.upsert_template("flash_fwd", "hash-a");
  }
  ~ReportTest() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static ProblemKey key(int seqlen_log2) {
    return {.dtype = DType::kBF16,
            .head_dim_k = 128,
            .head_dim_v = 128,
            .seqlen_q_log2 = static_cast<std::int8_t>(seqlen_log2),
            .seqlen_k_log2 = static_cast<std::int8_t>(seqlen_log2),
            .batch_heads_log2 = 0};
  }
  tuning_db::ProblemRowId problem(int seqlen_log2) {
    const std::int64_t seqlen = std::int64_t{1} << seqlen_log2;
    return db_.upsert_problem(
        {.key = key(seqlen_log2), .seqlen_q = seqlen, .seqlen_k = seqlen, .batch = 1, .heads_q = 1, .heads_kv = 1});
  }
  void measure(tuning_db::ProblemRowId p, const std::string& variant, double ms, bool ok = true) {
    db_.record_measurement({.device = device_,
                            .problem = p,
                            .variant = db_.upsert_variant(template_, variant),
                            .ok = ok,
                            .median_ms = ok ? std::optional<double>(ms) : std::nullopt,
                            .repetitions = 5});
  }
  static std::string default_id() {
    return heuristic_variant("fwd", DType::kBF16, 128, 128, require_arch(kEmulatedArch)).id();
  }
  static std::string other_id(int index) { return "flash_fwd/d128.bm128.bn64.wm4.wn1.st" + std::to_string(index); }

  fs::path dir_;
  tuning_db::TuningDb db_;
  tuning_db::DeviceRowId device_;
  tuning_db::TemplateRowId template_;
};

TEST(HtmlEscapeTest, EscapesMarkupAndQuotes) {
  EXPECT_EQ(html_escape("<a href='x'>\"&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&quot;&amp;&quot;&lt;/a&gt;");
  EXPECT_EQ(html_escape("fwd/bf16/dk128"), "fwd/bf16/dk128");
}

TEST_F(ReportTest, EmptyDatabaseIsAPageWithoutCharts) {
  const std::string page = html_report(db_, "empty <report>");
  EXPECT_TRUE(contains(page, "<title>empty &lt;report&gt;</title>"));
  EXPECT_TRUE(contains(page, "no measurements yet"));
  EXPECT_FALSE(contains(page, "<svg"));
  EXPECT_TRUE(contains(page, "</html>"));
}

TEST_F(ReportTest, GainIsTheDefaultsFastestOverTheBest) {
  const tuning_db::ProblemRowId p = problem(10);
  measure(p, other_id(1), 1.0);
  measure(p, default_id(), 2.5);
  const std::vector<tuning_db::BestRow> best = db_.best_all();
  ASSERT_EQ(best.size(), 1U);
  EXPECT_DOUBLE_EQ(gain_over_default(db_, best[0]).value_or(0), 2.5);
  const std::string page = html_report(db_, "t");
  EXPECT_TRUE(contains(page, "<td class=\"num\">2.50x</td>"));
  EXPECT_TRUE(contains(page, ">2.50x</text>"));  // the gain chart's bar
}

TEST_F(ReportTest, NoGainWhenTheDefaultFailedOrWasNotMeasured) {
  const tuning_db::ProblemRowId failed = problem(10);
  measure(failed, other_id(1), 1.0);
  measure(failed, default_id(), 0, /*ok=*/false);
  measure(problem(11), other_id(1), 1.0);
  for (const tuning_db::BestRow& row : db_.best_all()) EXPECT_FALSE(gain_over_default(db_, row)) << row.key.to_string();
  const std::string page = html_report(db_, "t");
  EXPECT_TRUE(contains(page, "no ok measurement on any key"));
  EXPECT_TRUE(contains(page, "class=\"failed\">failed: <code>" + default_id() + "</code>"));
}

TEST_F(ReportTest, ChartsTheTwelveKeysWithMostMeasurements) {
  // Key i holds i + 1 measurements, so keys 0 and 1 have the fewest.
  for (int i = 0; i < 14; ++i) {
    const tuning_db::ProblemRowId p = problem(i + 1);
    for (int v = 0; v <= i; ++v) measure(p, other_id(v), 1.0 + v);
  }
  const std::string page = html_report(db_, "t");
  EXPECT_TRUE(contains(page, "The 12 of 14 keys with most measurements."));
  EXPECT_EQ(count(page, "<figure>"), 12U);
  EXPECT_EQ(count(page, "<figure class=\"wide\">"), 1U);  // the gain chart
  // Every key is in the table; the two smallest have no chart.
  EXPECT_EQ(count(page, "<figcaption><code>" + key(1).to_string()), 0U);
  EXPECT_EQ(count(page, "<figcaption><code>" + key(14).to_string()), 1U);
  EXPECT_EQ(count(page, "<tr><td><code>fwd/bf16/"), 14U);
}

TEST_F(ReportTest, ABarPerVariantUpToThirty) {
  const tuning_db::ProblemRowId p = problem(10);
  for (int v = 0; v < 35; ++v) measure(p, "flash_fwd/v" + std::to_string(v), 1.0 + v);
  const std::string page = html_report(db_, "t");
  EXPECT_EQ(count(page, "<rect class=\"bar"), 30U);
  EXPECT_TRUE(contains(page, "5 slower variants not shown"));
  // The fastest is drawn first, highlighted.
  EXPECT_LT(page.find("<rect class=\"bar best\""), page.find("<rect class=\"bar\""));
}

}  // namespace
}  // namespace attune::tuner
