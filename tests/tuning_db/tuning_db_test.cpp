#include "tuning_db/tuning_db.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"
#include "tests/support/env_guard.h"
#include "tests/support/error_of.h"
#include "tests/support/xdg_location.h"
#include "tuning_db/schema.h"

namespace attune::tuning_db {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // the helpers of test_support.h

std::string variant_name(int index) { return "flash_fwd/d128.bm128.bn64.wm4.wn1.st" + std::to_string(index); }

// A database with one device, one template, `variant_count` variants and one problem.
struct Seeded {
  explicit Seeded(const fs::path& path, int variant_count = 3, const std::string& hash = "hash-a")
      : db(TuningDb::open(path)) {
    device = db.upsert_device(h200());
    tmpl = db.upsert_template("flash_fwd", hash);
    for (int i = 0; i < variant_count; ++i) variants.push_back(db.upsert_variant(tmpl, variant_name(i)));
    problem = db.upsert_problem(problem_record());
  }
  TuningDb db;
  DeviceRowId device;
  TemplateRowId tmpl;
  ProblemRowId problem;
  std::vector<VariantRowId> variants;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Forks `count` children held at one gate (a pipe the parent closes once all
// exist, so they start together); child i exits with body(i). `statuses`
// gets their wait statuses in order.
void run_children_together(int count, const std::function<int(int child)>& body, std::vector<int>& statuses) {
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> children;
  for (int child = 0; child < count; ++child) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(gate[1]);
      char byte = 0;
      [[maybe_unused]] const ssize_t n = ::read(gate[0], &byte, 1);  // returns when the parent closes the gate
      ::_exit(body(child));
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // all start now
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    statuses.push_back(status);
  }
}

using attune::testing::EnvGuard;

TEST(TuningDbTest, OpenCreatesDirectoriesAndAWalFileOfTheCurrentSchema) {
  TempDir dir;
  const fs::path path = dir.path() / "a" / "b" / "tuning.db";
  TuningDb db = TuningDb::open(path);
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(db.path(), path);
  EXPECT_EQ(db.schema_version(), kSchemaVersion);
  EXPECT_TRUE(db.best_all().empty());
  EXPECT_TRUE(db.verify().ok());
  // File format bytes 18 and 19 are 2 in WAL mode.
  const std::string header = read_bytes(path);
  ASSERT_GE(header.size(), 20u);
  EXPECT_EQ(header[18], 2);
  EXPECT_EQ(header[19], 2);
}

TEST(TuningDbTest, ReopeningKeepsTheData) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  DeviceRowId device;
  TemplateRowId tmpl;
  ProblemRowId problem;
  std::vector<VariantRowId> variants;
  std::vector<BestRow> before;
  {
    Seeded first(path);
    ASSERT_TRUE(first.db.record_measurement(measurement(first.device, first.problem, first.variants[1], 0.75)));
    device = first.device;
    tmpl = first.tmpl;
    problem = first.problem;
    variants = first.variants;
    before = first.db.best_all();
  }

  Seeded again(path);
  EXPECT_EQ(again.device, device);
  EXPECT_EQ(again.tmpl, tmpl);
  EXPECT_EQ(again.problem, problem);
  EXPECT_EQ(again.variants, variants);
  EXPECT_EQ(again.db.best_all(), before);
  const std::vector<BestRow> best = again.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].key, problem_record().key);
  EXPECT_EQ(best[0].variant_id, variant_name(1));
  EXPECT_EQ(best[0].kernel, "flash_fwd");
  EXPECT_EQ(best[0].template_hash, "hash-a");
  EXPECT_DOUBLE_EQ(best[0].median_ms, 0.75);

  const std::vector<MeasurementRow> rows = again.db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 1u);
  const MeasurementRow& row = rows[0];
  EXPECT_EQ(row.device_key, h200().key);
  EXPECT_EQ(row.problem, problem_record());
  EXPECT_EQ(row.variant_id, variant_name(1));
  EXPECT_TRUE(row.ok);
  EXPECT_EQ(row.median_ms, 0.75);
  EXPECT_EQ(row.spread_ms, 0.0075);
  EXPECT_EQ(row.repetitions, 50);
  EXPECT_EQ(row.tflops, 1.0 / 0.75);
  EXPECT_EQ(row.max_error, 1e-3);
  EXPECT_EQ(row.driver_version, "580.65");
  EXPECT_EQ(row.nvrtc_version, "13.0");
  EXPECT_EQ(row.attune_version, "0.1.0");
  EXPECT_TRUE(std::regex_match(row.measured_at, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << row.measured_at;
}

TEST(TuningDbTest, DefaultPathHonoursTheEnvironment) {
  const EnvGuard guard({"ATTUNE_TUNING_DB", "XDG_DATA_HOME", "HOME"});
  attune::testing::expect_xdg_location(&TuningDb::default_path, "ATTUNE_TUNING_DB", "XDG_DATA_HOME", ".local/share",
                                       "attune/tuning.db");

  EnvGuard::set("HOME", std::nullopt);
  EXPECT_TRUE(contains(attune::testing::error_of<DbError>([] { (void)TuningDb::default_path(); }), "HOME"));
}

TEST(TuningDbTest, UpsertsAreIdempotentAndDistinguishKeys) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  EXPECT_EQ(s.db.upsert_device(h200()), s.device);
  EXPECT_EQ(s.db.upsert_template("flash_fwd", "hash-a"), s.tmpl);
  EXPECT_EQ(s.db.upsert_variant(s.tmpl, variant_name(0)), s.variants[0]);
  EXPECT_EQ(s.db.upsert_problem(problem_record()), s.problem);

  EXPECT_NE(s.db.upsert_device(a100()), s.device);
  const TemplateRowId other_template = s.db.upsert_template("flash_fwd", "hash-b");
  EXPECT_NE(other_template, s.tmpl);
  EXPECT_NE(s.db.upsert_variant(other_template, variant_name(0)), s.variants[0]);
  // Same key, other exact sizes: another problem row.
  EXPECT_NE(s.db.upsert_problem(problem_record(10, 1000)), s.problem);

  // A known device keeps its id and takes the newer versions.
  DeviceRecord upgraded = h200();
  upgraded.driver_version = "590.1";
  EXPECT_EQ(s.db.upsert_device(upgraded), s.device);

  RawDb raw(path);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM devices"), 2);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM devices WHERE driver_version = '590.1'"), 1);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM templates"), 2);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM variants"), 4);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM problems"), 2);
}

// Keys are typed on the way in; a row that another program wrote with a
// value this version does not know is a clear error on the way out.
TEST(TuningDbTest, AProblemRowWithAnUnknownOpIsAClearError) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  {
    Seeded s(path);
    ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  }
  RawDb(path).exec("UPDATE problems SET op = 'attn'");
  const TuningDb db = TuningDb::open(path);
  try {
    (void)db.all_measurements();
    FAIL() << "expected DbError";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("op 'attn'; expected fwd, decode or bwd"), std::string::npos) << e.what();
  }
}

// Modifiers in the stored text are modifier_names' own spelling only:
// "sinks+softcap" parses as a known key but would be another key to SQL.
TEST(TuningDbTest, AProblemRowWithUnknownModifiersIsAClearError) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  {
    Seeded s(path);
    ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  }
  for (const char* text : {"tanh", "sinks+softcap", "", "softcap+"}) {
    RawDb(path).exec(std::string("UPDATE problems SET modifiers = '") + text + "'; UPDATE best SET modifiers = '" +
                     text + "'");
    const TuningDb db = TuningDb::open(path);
    const std::string expected =
        std::string("modifiers '") + text + "'; expected none, or softcap, sinks and alibi joined by '+' in that order";
    std::string message = attune::testing::error_of<DbError>([&] { (void)db.all_measurements(); });
    EXPECT_TRUE(contains(message, expected)) << message;
    message = attune::testing::error_of<DbError>([&] { (void)db.best_all(); });
    EXPECT_TRUE(contains(message, expected)) << message;
  }
}

TEST(TuningDbTest, KeysDifferingOnlyInModifiersAreStoredAndLookedUpApart) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  ProblemRecord modified = problem_record();  // the same sizes and bucket exponents
  modified.key.modifiers = kModSoftcap | kModSinks;
  const ProblemRowId with_modifiers = s.db.upsert_problem(modified);
  EXPECT_NE(with_modifiers, s.problem);
  EXPECT_EQ(s.db.upsert_problem(modified), with_modifiers);
  EXPECT_EQ(s.db.upsert_problem(problem_record()), s.problem);

  // The slower variant is measured with modifiers after the faster one
  // without: had they shared a best row, the first would have kept it.
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, with_modifiers, s.variants[1], 2.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, with_modifiers, s.variants[2], 3.0)));

  const std::vector<BestRow> best = s.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].key, problem_record().key);  // "none" sorts before "softcap+sinks"
  EXPECT_EQ(best[0].variant_id, variant_name(0));
  EXPECT_DOUBLE_EQ(best[0].median_ms, 1.0);
  EXPECT_EQ(best[1].key, modified.key);
  EXPECT_EQ(best[1].variant_id, variant_name(1));
  EXPECT_DOUBLE_EQ(best[1].median_ms, 2.0);

  const std::vector<MeasurementRow> plain = s.db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].problem, problem_record());
  const std::vector<MeasurementRow> rows = s.db.measurements(h200().key, modified.key);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].problem, modified);
  EXPECT_EQ(rows[0].variant_id, variant_name(1));
  ProblemKey alibi = modified.key;
  alibi.modifiers = kModAlibi;
  EXPECT_TRUE(s.db.measurements(h200().key, alibi).empty());
  EXPECT_TRUE(s.db.verify().ok());

  // Stored as modifier_names' text, readable with sqlite3.
  RawDb raw(path);
  EXPECT_EQ(raw.column("SELECT modifiers FROM problems ORDER BY id"), "none\nsoftcap+sinks\n");
  EXPECT_EQ(raw.column("SELECT modifiers || ' ' || median_ms FROM best ORDER BY modifiers"),
            "none 1.0\nsoftcap+sinks 2.0\n");

  // Rebuilding the best rows (prune, merge) keeps the keys apart too.
  EXPECT_EQ(s.db.prune_stale_templates("flash_fwd", "hash-a"), 0);
  EXPECT_EQ(s.db.best_for_device(h200().key), best);

  // verify() compares within a key: a best row moved to another modifier set is caught.
  raw.exec("UPDATE best SET modifiers = 'alibi' WHERE modifiers = 'softcap+sinks'");
  const VerifyReport report = s.db.verify();
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_TRUE(contains(report.problems[0], "/alibi names")) << report.problems[0];
  EXPECT_TRUE(contains(report.problems[1], "no best row for " + h200().key + " " + modified.key.to_string()))
      << report.problems[1];
}

TEST(TuningDbTest, RecordsOutsideTheirDomainsAreRefused) {
  TempDir dir;
  Seeded s(dir.path() / "tuning.db");
  ProblemRecord bad = problem_record();
  bad.key.head_dim_k = 0;
  EXPECT_THROW(s.db.upsert_problem(bad), InvalidArgument);
  bad = problem_record();
  bad.seqlen_q = -1;
  EXPECT_THROW(s.db.upsert_problem(bad), InvalidArgument);
  bad = problem_record();
  bad.key.modifiers = 16;  // no such modifier: modifier_names would store it as "none"
  EXPECT_TRUE(contains(attune::testing::error_of<InvalidArgument>([&] { s.db.upsert_problem(bad); }),
                       "modifiers is 16; expected a combination of"));

  MeasurementRecord no_time = measurement(s.device, s.problem, s.variants[0], 1.0);
  no_time.median_ms.reset();
  EXPECT_THROW(s.db.record_measurement(no_time), InvalidArgument);
  EXPECT_THROW(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], -1.0)), InvalidArgument);
  EXPECT_THROW(s.db.upsert_device({}), InvalidArgument);
  EXPECT_THROW(s.db.upsert_variant(s.tmpl, ""), InvalidArgument);
  EXPECT_FALSE(s.db.has_measurement(s.device, s.problem, s.variants[0]));

  // A failed measurement may come without a time, and keeps why it failed.
  no_time.ok = false;
  no_time.error = "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS";
  EXPECT_TRUE(s.db.record_measurement(no_time));
  const std::vector<MeasurementRow> rows = s.db.all_measurements();
  ASSERT_EQ(rows.size(), 1U);
  EXPECT_EQ(rows[0].error, "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS");
}

TEST(TuningDbTest, FasterMeasurementReplacesTheBestAndSlowerDoesNot) {
  TempDir dir;
  Seeded s(dir.path() / "tuning.db");
  const auto best_variant = [&] {
    const std::vector<BestRow> best = s.db.best_for_device(h200().key);
    return best.size() == 1 ? best[0].variant_id + "@" + std::to_string(best[0].median_ms)
                            : "rows:" + std::to_string(best.size());
  };
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 2.0)));
  EXPECT_EQ(best_variant(), variant_name(0) + "@" + std::to_string(2.0));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[1], 3.0)));
  EXPECT_EQ(best_variant(), variant_name(0) + "@" + std::to_string(2.0));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[2], 1.0)));
  EXPECT_EQ(best_variant(), variant_name(2) + "@" + std::to_string(1.0));
  EXPECT_TRUE(s.db.verify().ok());
}

TEST(TuningDbTest, FailedMeasurementNeverBecomesBest) {
  TempDir dir;
  Seeded s(dir.path() / "tuning.db");
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 0.5, /*ok=*/false)));
  EXPECT_TRUE(s.db.best_for_device(h200().key).empty());
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[1], 2.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[2], 0.1, /*ok=*/false)));
  const std::vector<BestRow> best = s.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].variant_id, variant_name(1));
  EXPECT_DOUBLE_EQ(best[0].median_ms, 2.0);

  // Ok rows first (fastest first), then the failed ones.
  const std::vector<MeasurementRow> rows = s.db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].variant_id, variant_name(1));
  EXPECT_FALSE(rows[1].ok);
  EXPECT_FALSE(rows[2].ok);
  EXPECT_TRUE(s.db.verify().ok());
}

TEST(TuningDbTest, BestIsPerDeviceAndProblemKeyAcrossExactSizes) {
  TempDir dir;
  Seeded s(dir.path() / "tuning.db");
  const ProblemRowId same_key = s.db.upsert_problem(problem_record(10, 1000));
  const ProblemRowId other_key = s.db.upsert_problem(problem_record(11, 2048));
  const DeviceRowId other_device = s.db.upsert_device(a100());
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 2.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, same_key, s.variants[1], 1.5)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, other_key, s.variants[0], 3.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(other_device, s.problem, s.variants[2], 4.0)));

  const std::vector<BestRow> h200_best = s.db.best_for_device(h200().key);
  ASSERT_EQ(h200_best.size(), 2u);
  EXPECT_EQ(h200_best[0].key.seqlen_q_log2, 10);
  EXPECT_EQ(h200_best[0].variant_id, variant_name(1));
  EXPECT_EQ(h200_best[1].key.seqlen_q_log2, 11);
  EXPECT_EQ(h200_best[1].variant_id, variant_name(0));
  const std::vector<BestRow> a100_best = s.db.best_for_device(a100().key);
  ASSERT_EQ(a100_best.size(), 1u);
  EXPECT_EQ(a100_best[0].variant_id, variant_name(2));
  EXPECT_TRUE(s.db.best_for_device("no such device").empty());

  const std::vector<BestRow> all = s.db.best_all();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].device_key, a100().key);  // ordered by device key
  EXPECT_EQ(s.db.measurements(h200().key, problem_record().key).size(), 2u);
  EXPECT_TRUE(s.db.verify().ok());
}

TEST(TuningDbTest, MeasuringTheSameVariantTwiceIsRefused) {
  TempDir dir;
  Seeded s(dir.path() / "tuning.db");
  EXPECT_FALSE(s.db.has_measurement(s.device, s.problem, s.variants[0]));
  EXPECT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 2.0)));
  EXPECT_TRUE(s.db.has_measurement(s.device, s.problem, s.variants[0]));
  EXPECT_FALSE(s.db.has_measurement(s.device, s.problem, s.variants[1]));
  EXPECT_FALSE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 0.5)));
  const std::vector<MeasurementRow> rows = s.db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].median_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.db.best_for_device(h200().key).at(0).median_ms, 2.0);
}

TEST(TuningDbTest, CompileResultsAreReplacedAndFound) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  EXPECT_FALSE(s.db.find_compile(s.variants[0], "bf16", "sm_90a", "13.0"));
  CompileRecord result{.variant = s.variants[0],
                       .dtype = "bf16",
                       .arch = "sm_90a",
                       .nvrtc_version = "13.0",
                       .ok = true,
                       .registers = 168,
                       .spill_bytes = 0,
                       .shared_bytes = 98304,
                       .compile_seconds = 1.25,
                       .log = ""};
  s.db.record_compile(result);
  EXPECT_EQ(s.db.find_compile(s.variants[0], "bf16", "sm_90a", "13.0"), result);
  result.ok = false;
  result.log = "error: too much shared memory";
  s.db.record_compile(result);
  EXPECT_EQ(s.db.find_compile(s.variants[0], "bf16", "sm_90a", "13.0"), result);
  EXPECT_FALSE(s.db.find_compile(s.variants[0], "bf16", "sm_80", "13.0"));
  EXPECT_EQ(RawDb(path).scalar("SELECT count(*) FROM compile_results"), 1);
}

TEST(TuningDbTest, AFailedWriteRollsBackItsWholeTransaction) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  RawDb raw(path);
  // Fails the best update, after the measurement row was inserted.
  raw.exec("CREATE TRIGGER refuse_best BEFORE INSERT ON best BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  EXPECT_TRUE(contains(attune::testing::error_of<DbError>(
                           [&] { s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)); }),
                       "injected failure"));
  // Takes the write lock: this would time out had the transaction been left open.
  raw.exec("DROP TRIGGER refuse_best");
  EXPECT_FALSE(s.db.has_measurement(s.device, s.problem, s.variants[0]));
  EXPECT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  EXPECT_EQ(s.db.best_for_device(h200().key).size(), 1u);
}

TEST(TuningDbTest, AGarbageFileIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  std::string garbage(4096, '\0');
  std::mt19937 random(7);
  for (char& c : garbage) c = static_cast<char>(random() & 0xFF);
  std::ofstream(path, std::ios::binary).write(garbage.data(), static_cast<std::streamsize>(garbage.size()));

  const std::string message = attune::testing::error_of<DbError>([&] { (void)TuningDb::open(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "corrupt or not an SQLite database")) << message;
  EXPECT_EQ(read_bytes(path), garbage);
  for (const char* suffix : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(path.string() + suffix)) << suffix;
}

TEST(TuningDbTest, ATruncatedDatabaseIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  {
    Seeded s(path, 60);
    for (std::size_t i = 0; i < s.variants.size(); ++i) {
      ASSERT_TRUE(
          s.db.record_measurement(measurement(s.device, s.problem, s.variants[i], 1.0 + static_cast<double>(i))));
      s.db.record_compile({.variant = s.variants[i],
                           .dtype = "bf16",
                           .arch = "sm_90a",
                           .nvrtc_version = "13.0",
                           .log = std::string(1000, 'x')});
    }
  }  // closing checkpoints the WAL into the file
  const std::uintmax_t size = fs::file_size(path);
  ASSERT_GT(size, 16u * 4096u);
  fs::resize_file(path, size / 2 + 1000);  // mid-page
  const std::string before = read_bytes(path);

  const std::string message = attune::testing::error_of<DbError>([&] { (void)TuningDb::open(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_EQ(read_bytes(path), before);
}

TEST(TuningDbTest, AnotherProgramsDatabaseIsRefused) {
  TempDir dir;
  const fs::path path = dir.path() / "other.db";
  std::ofstream(path).close();
  RawDb(path).exec("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)");
  const std::string before = read_bytes(path);
  const std::string message = attune::testing::error_of<DbError>([&] { (void)TuningDb::open(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "no attune schema version")) << message;
  EXPECT_EQ(read_bytes(path), before);
}

TEST(TuningDbTest, ALockHeldBeyondTheBusyTimeoutIsDbError) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  RawDb raw(path);
  raw.exec("BEGIN IMMEDIATE");  // another writer holds the lock for longer than 10 s
  const std::string message = attune::testing::error_of<DbError>(
      [&] { s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)); });
  EXPECT_TRUE(contains(message, "locked")) << message;
  EXPECT_TRUE(contains(message, path.string())) << message;
  raw.exec("ROLLBACK");
  EXPECT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
}

TEST(TuningDbTest, TwoProcessesWritingAtOnceLoseNothing) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  constexpr int kPerChild = 200;
  { const Seeded s(path, 0); }  // closed before forking: each child opens its own connection

  std::vector<int> statuses;
  ASSERT_NO_FATAL_FAILURE(run_children_together(
      2,
      [&](int child) {
        int status = 0;
        try {
          Seeded s(path, 0);
          for (int i = 0; i < kPerChild; ++i) {
            const int index = child * kPerChild + i;
            const VariantRowId variant = s.db.upsert_variant(s.tmpl, variant_name(index));
            if (!s.db.record_measurement(measurement(s.device, s.problem, variant, 1.0 + index))) status = 2;
          }
        } catch (...) {
          status = 3;
        }
        return status;
      },
      statuses));
  for (const int status : statuses) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  TuningDb db = TuningDb::open(path);
  RawDb raw(path);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM measurements"), 2 * kPerChild);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM variants"), 2 * kPerChild);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM devices"), 1);
  const std::vector<BestRow> best = db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].variant_id, variant_name(0));
  EXPECT_TRUE(db.verify().ok());
}

// Creating a database is a write like any other: processes that find no
// file and create it at the same moment must all end with one sound schema.
TEST(TuningDbTest, ProcessesCreatingOneNewDatabaseAtOnceAllSucceed) {
  constexpr int kRounds = 10;
  constexpr int kProcesses = 6;
  for (int round = 0; round < kRounds; ++round) {
    TempDir dir;
    const fs::path path = dir.path() / "sub" / "tuning.db";
    std::vector<int> statuses;
    ASSERT_NO_FATAL_FAILURE(run_children_together(
        kProcesses,
        [&](int child) {
          try {
            Seeded s(path, 0);
            const VariantRowId variant = s.db.upsert_variant(s.tmpl, variant_name(child));
            return s.db.record_measurement(measurement(s.device, s.problem, variant, 1.0 + child)) ? 0 : 2;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "child %d: %s\n", child, e.what());
            return 3;
          }
        },
        statuses));
    for (const int status : statuses) {
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0) << "round " << round;
    }
    RawDb raw(path);
    EXPECT_EQ(raw.scalar("SELECT count(*) FROM measurements"), kProcesses) << "round " << round;
    EXPECT_EQ(raw.scalar("PRAGMA user_version"), kSchemaVersion);
  }
}

TEST(TuningDbTest, UseAfterForkThrowsAndLeavesTheParentsConnectionAlone) {
  TempDir dir;
  std::optional<Seeded> s(std::in_place, dir.path() / "tuning.db");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int status = 0;
    try {
      (void)s->db.schema_version();
      status = 1;
    } catch (const DbError& e) {
      if (!contains(e.what(), "opened in process")) status = 2;
    }
    try {
      s->db.record_measurement(measurement(s->device, s->problem, s->variants[0], 1.0));
      status = 3;
    } catch (const DbError&) {
    }
    s.reset();  // the destructor must not close the parent's handle
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(s->db.has_measurement(s->device, s->problem, s->variants[0]));
  EXPECT_TRUE(s->db.record_measurement(measurement(s->device, s->problem, s->variants[0], 1.0)));
  EXPECT_TRUE(s->db.verify().ok());
}

TEST(TuningDbTest, MergeCopiesTheUnionRecomputesBestAndIsIdempotent) {
  TempDir dir;
  const fs::path path_a = dir.path() / "a.db";
  const fs::path path_b = dir.path() / "b.db";
  Seeded a(path_a, 2);
  ASSERT_TRUE(a.db.record_measurement(measurement(a.device, a.problem, a.variants[0], 2.0)));
  ASSERT_TRUE(a.db.record_measurement(measurement(a.device, a.problem, a.variants[1], 3.0)));
  a.db.record_compile(
      {.variant = a.variants[0], .dtype = "bf16", .arch = "sm_90a", .nvrtc_version = "13.0", .ok = true});

  {
    // Rows created in another order, so every id differs from a's.
    TuningDb b = TuningDb::open(path_b);
    const DeviceRowId b_a100 = b.upsert_device(a100());
    const DeviceRowId b_h200 = b.upsert_device(h200());
    (void)b.upsert_template("flash_fwd", "hash-z");
    const TemplateRowId tmpl = b.upsert_template("flash_fwd", "hash-a");
    const VariantRowId v2 = b.upsert_variant(tmpl, variant_name(2));
    const VariantRowId v1 = b.upsert_variant(tmpl, variant_name(1));
    const ProblemRowId other_key = b.upsert_problem(problem_record(11, 2048));
    const ProblemRowId same = b.upsert_problem(problem_record());
    ASSERT_TRUE(b.record_measurement(measurement(b_h200, same, v1, 2.5)));  // also in a (3.0): a's row stays
    ASSERT_TRUE(b.record_measurement(measurement(b_h200, same, v2, 1.5)));  // new and fastest
    ASSERT_TRUE(b.record_measurement(measurement(b_a100, other_key, v2, 4.0)));
    ASSERT_TRUE(b.record_measurement(measurement(b_a100, same, v1, 0.1, /*ok=*/false)));
    b.record_compile({.variant = v2, .dtype = "bf16", .arch = "sm_80", .nvrtc_version = "13.0", .ok = false});
  }

  const MergeReport report = a.db.merge_from(path_b);
  EXPECT_EQ(report.devices, 1);
  EXPECT_EQ(report.templates, 1);
  EXPECT_EQ(report.variants, 1);  // hash-a's v2 (v1 is known)
  EXPECT_EQ(report.problems, 1);
  EXPECT_EQ(report.compile_results, 1);
  EXPECT_EQ(report.measurements, 3);

  const std::vector<BestRow> h200_best = a.db.best_for_device(h200().key);
  ASSERT_EQ(h200_best.size(), 1u);
  EXPECT_EQ(h200_best[0].variant_id, variant_name(2));
  EXPECT_DOUBLE_EQ(h200_best[0].median_ms, 1.5);
  const std::vector<BestRow> a100_best = a.db.best_for_device(a100().key);
  ASSERT_EQ(a100_best.size(), 1u);  // the failed one is not a best
  EXPECT_EQ(a100_best[0].key.seqlen_q_log2, 11);
  const std::vector<MeasurementRow> rows = a.db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].variant_id, variant_name(1));
  EXPECT_EQ(rows[2].median_ms, 3.0);  // the row already here wins
  EXPECT_TRUE(a.db.verify().ok());

  RawDb raw(path_a);
  const std::string merged = raw.dump();
  const MergeReport again = a.db.merge_from(path_b);
  EXPECT_EQ(
      again.devices + again.templates + again.variants + again.problems + again.compile_results + again.measurements,
      0);
  EXPECT_EQ(raw.dump(), merged);
  EXPECT_EQ(a.db.merge_from(path_a).measurements, 0);  // itself

  // The other direction, with a still open, yields the same best rows.
  TuningDb b = TuningDb::open(path_b);
  EXPECT_EQ(b.merge_from(path_a).measurements, 1);  // a's v1 row loses to b's own
  EXPECT_EQ(b.best_all(), a.db.best_all());
  EXPECT_TRUE(b.verify().ok());
}

TEST(TuningDbTest, MergeKeepsModifiersApart) {
  TempDir dir;
  const fs::path path_a = dir.path() / "a.db";
  const fs::path path_b = dir.path() / "b.db";
  const auto at_one_time = [](MeasurementRecord m) {
    m.measured_at = "2025-01-02T03:04:05.000Z";  // the same row in both files
    return m;
  };
  Seeded a(path_a);
  ASSERT_TRUE(a.db.record_measurement(at_one_time(measurement(a.device, a.problem, a.variants[0], 2.0))));
  ProblemRecord sinks = problem_record();
  sinks.key.modifiers = kModSinks;
  ProblemRecord all = problem_record();
  all.key.modifiers = kModKnown;
  {
    Seeded b(path_b);
    const ProblemRowId b_sinks = b.db.upsert_problem(sinks);
    const ProblemRowId b_all = b.db.upsert_problem(all);
    ASSERT_TRUE(b.db.record_measurement(measurement(b.device, b_sinks, b.variants[1], 1.0)));  // faster than a's
    ASSERT_TRUE(b.db.record_measurement(measurement(b.device, b_all, b.variants[2], 4.0)));
    ASSERT_TRUE(b.db.record_measurement(at_one_time(measurement(b.device, b.problem, b.variants[0], 2.0))));
  }
  const MergeReport report = a.db.merge_from(path_b);
  EXPECT_EQ(report.problems, 2);
  EXPECT_EQ(report.measurements, 2);
  EXPECT_EQ(report.measurements_present, 1);

  const std::vector<BestRow> best = a.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 3u);
  EXPECT_EQ(best[0].key, problem_record().key);
  EXPECT_EQ(best[0].variant_id, variant_name(0));  // not replaced by the faster sinks row
  EXPECT_EQ(best[1].key, sinks.key);
  EXPECT_EQ(best[1].variant_id, variant_name(1));
  EXPECT_EQ(best[2].key, all.key);
  EXPECT_EQ(best[2].variant_id, variant_name(2));
  EXPECT_EQ(a.db.measurements(h200().key, sinks.key).at(0).problem, sinks);
  EXPECT_EQ(a.db.measurements(h200().key, problem_record().key).size(), 1u);
  EXPECT_TRUE(a.db.verify().ok());
  EXPECT_EQ(RawDb(path_a).column("SELECT modifiers FROM problems ORDER BY id"),
            "none\nsinks\nsoftcap+sinks+alibi+dropout\n");

  const MergeReport again = a.db.merge_from(path_b);
  EXPECT_EQ(again.problems + again.measurements, 0);
}

TEST(TuningDbTest, MergeRefusesMissingCorruptAndOldFiles) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 2.0)));
  RawDb raw(path);
  const std::string before = raw.dump();

  const fs::path missing = dir.path() / "missing.db";
  EXPECT_TRUE(contains(attune::testing::error_of<DbError>([&] { s.db.merge_from(missing); }), missing.string()));
  EXPECT_FALSE(fs::exists(missing));

  const fs::path garbage = dir.path() / "garbage.db";
  std::ofstream(garbage, std::ios::binary) << std::string(4096, 'g');
  const std::string message = attune::testing::error_of<DbError>([&] { s.db.merge_from(garbage); });
  EXPECT_TRUE(contains(message, garbage.string())) << message;
  EXPECT_EQ(read_bytes(garbage), std::string(4096, 'g'));

  const fs::path newer = dir.path() / "newer.db";
  { const Seeded other(newer); }
  RawDb(newer).exec("PRAGMA user_version = 5");
  EXPECT_TRUE(contains(attune::testing::error_of<DbError>([&] { s.db.merge_from(newer); }),
                       "schema version 5; expected 4 (written by a newer attune"));

  // An older file is not migrated behind its owner's back: merging is read-only.
  const fs::path older = dir.path() / "older.db";
  create_schema_for_test(older, 3);
  const std::string older_bytes = read_bytes(older);
  EXPECT_TRUE(contains(attune::testing::error_of<DbError>([&] { s.db.merge_from(older); }),
                       "schema version 3; expected 4 (open it once with this attune to migrate it)"));
  EXPECT_EQ(read_bytes(older), older_bytes);

  EXPECT_EQ(raw.dump(), before);
  EXPECT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[1], 1.0)));  // still usable
}

TEST(TuningDbTest, MergeOfManyShardsReportsEachAndRefusesABadOneBeforeWriting) {
  TempDir dir;
  const fs::path target = dir.path() / "tuning.db";
  const fs::path shard0 = dir.path() / "shard-0.db";
  const fs::path shard1 = dir.path() / "shard-1.db";
  {
    Seeded s0(shard0);
    ASSERT_TRUE(s0.db.record_measurement(measurement(s0.device, s0.problem, s0.variants[0], 2.0)));
    ASSERT_TRUE(s0.db.record_measurement(measurement(s0.device, s0.problem, s0.variants[1], 1.0)));
    Seeded s1(shard1);
    ASSERT_TRUE(s1.db.record_measurement(measurement(s1.device, s1.problem, s1.variants[1], 0.5)));  // conflicts
    ASSERT_TRUE(s1.db.record_measurement(measurement(s1.device, s1.problem, s1.variants[2], 3.0)));
  }
  Seeded t(target);
  RawDb raw(target);
  const std::string before = raw.dump();

  // A damaged file and one of another schema version, last in the list:
  // refused by name before the good ones are merged.
  const fs::path garbage = dir.path() / "shard-2.db";
  std::ofstream(garbage, std::ios::binary) << std::string(4096, 'g');
  std::string message = attune::testing::error_of<DbError>([&] { t.db.merge_from({shard0, shard1, garbage}); });
  EXPECT_TRUE(contains(message, garbage.string())) << message;
  const fs::path newer = dir.path() / "shard-3.db";
  { const Seeded other(newer); }
  RawDb(newer).exec("PRAGMA user_version = 5");
  message = attune::testing::error_of<DbError>([&] { t.db.merge_from({shard0, newer, shard1}); });
  EXPECT_TRUE(contains(message, newer.string()) && contains(message, "schema version 5; expected 4")) << message;
  EXPECT_EQ(raw.dump(), before);

  const std::vector<MergeReport> reports = t.db.merge_from({shard0, shard1});
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].measurements, 2);
  EXPECT_EQ(reports[0].measurements_present + reports[0].measurements_conflicting, 0);
  EXPECT_EQ(reports[1].measurements, 1);
  EXPECT_EQ(reports[1].measurements_conflicting, 1);  // variant 1: shard 0's row, merged first, stays
  const std::vector<BestRow> best = t.db.best_all();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].variant_id, variant_name(1));
  EXPECT_DOUBLE_EQ(best[0].median_ms, 1.0);
  EXPECT_TRUE(t.db.verify().ok());

  const std::vector<MergeReport> again = t.db.merge_from({shard1, shard0});
  EXPECT_EQ(again[0].measurements + again[1].measurements, 0);
  EXPECT_EQ(again[0].measurements_present, 1);  // variant 2; variant 1 still conflicts
  EXPECT_EQ(again[0].measurements_conflicting, 1);
  EXPECT_EQ(again[1].measurements_present, 2);
}

TEST(TuningDbTest, VerifyDetectsATamperedBestRow) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[1], 2.0)));
  ASSERT_TRUE(s.db.verify().ok());

  RawDb raw(path);
  const std::string slower = std::to_string(s.variants[1].value);
  raw.exec("UPDATE best SET variant = " + slower +
           ", median_ms = 2.0, measurement = (SELECT id FROM measurements "
           "WHERE variant = " +
           slower + ")");
  VerifyReport report = s.db.verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(contains(report.problems[0], variant_name(1))) << report.problems[0];
  EXPECT_TRUE(contains(report.problems[0], "the fastest ok measurement is \"" + variant_name(0))) << report.problems[0];

  // A best row whose time matches no measurement of its variant.
  raw.exec("UPDATE best SET variant = " + slower + ", median_ms = 1.0");
  report = s.db.verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(contains(report.problems[0], "does not match")) << report.problems[0];

  raw.exec("DELETE FROM best");
  report = s.db.verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(contains(report.problems[0], "no best row")) << report.problems[0];
}

TEST(TuningDbTest, PruningStaleTemplatesRecomputesBest) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path);
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, s.variants[0], 1.0)));
  s.db.record_compile({.variant = s.variants[0], .dtype = "bf16", .arch = "sm_90a", .nvrtc_version = "13.0"});
  const TemplateRowId current = s.db.upsert_template("flash_fwd", "hash-b");
  const VariantRowId fresh = s.db.upsert_variant(current, variant_name(0));
  ASSERT_TRUE(s.db.record_measurement(measurement(s.device, s.problem, fresh, 2.0)));
  ASSERT_EQ(s.db.best_for_device(h200().key).at(0).template_hash, "hash-a");

  EXPECT_EQ(s.db.prune_stale_templates("flash_fwd", "hash-b"), 1);
  const std::vector<BestRow> best = s.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].template_hash, "hash-b");
  EXPECT_DOUBLE_EQ(best[0].median_ms, 2.0);
  RawDb raw(path);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM templates"), 1);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM compile_results"), 0);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM variants"), 1);
  EXPECT_TRUE(s.db.verify().ok());
  EXPECT_EQ(s.db.prune_stale_templates("flash_fwd", "hash-b"), 0);
}

TEST(TuningDbTest, PruningOlderVersionsKeepsCurrentAndNewerAndRecomputesBest) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  Seeded s(path, 6);
  // Fastest first, so the best row has to move each time one is pruned.
  const std::optional<std::string> versions[] = {"0.0.9", std::nullopt, "garbage", "0.9.5", "0.10.0", "0.1.0"};
  for (std::size_t i = 0; i < std::size(versions); ++i) {
    MeasurementRecord m = measurement(s.device, s.problem, s.variants[i], 1.0 + static_cast<double>(i));
    m.attune_version = versions[i].value_or("");
    ASSERT_TRUE(s.db.record_measurement(m));
  }
  RawDb raw(path);
  raw.exec("UPDATE measurements SET attune_version = NULL WHERE attune_version = ''");  // as before schema 2

  const VersionPruneReport report = s.db.prune_older_versions("0.10.0");
  EXPECT_EQ(report.measurements, 5);
  EXPECT_EQ(report.by_version,
            (std::map<std::string, std::int64_t>{{"", 1}, {"0.0.9", 1}, {"0.1.0", 1}, {"0.9.5", 1}, {"garbage", 1}}));
  const std::vector<BestRow> best = s.db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].variant_id, variant_name(4));  // 0.10.0 is not older than 0.10.0, whatever text order says
  EXPECT_TRUE(s.db.verify().ok());
  EXPECT_EQ(s.db.prune_older_versions("0.10.0").measurements, 0);
  EXPECT_EQ(s.db.prune_older_versions("0.2").measurements, 0);  // keeps newer ones

  const std::string message = [&] {
    try {
      s.db.prune_older_versions("latest");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_TRUE(contains(message, "got \"latest\"; expected dotted numbers")) << message;
}

}  // namespace
}  // namespace attune::tuning_db
