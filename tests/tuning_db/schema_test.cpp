#include "tuning_db/schema.h"

#include <gtest/gtest.h>

#include <string>

#include "test_support.h"
#include "tests/support/error_of.h"
#include "tuning_db/tuning_db.h"

namespace attune::tuning_db {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // the helpers of test_support.h

constexpr const char* kVariant = "flash_fwd/d128.bm128.bn64.wm4.wn1.st2";

// The schema's DDL as SQLite stores it, in a fixed order.
std::string schema_of(const fs::path& path) {
  return RawDb(path).column("SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master ORDER BY name");
}

// Whether `path` is (still) at the old schema `version`, without the column
// `table`.`column` that the migration from it adds.
::testing::AssertionResult is_old_schema(const fs::path& path, int version, const std::string& table,
                                         const std::string& column) {
  RawDb raw(path);
  const std::int64_t found = raw.scalar("PRAGMA user_version");
  const std::int64_t columns =
      raw.scalar("SELECT count(*) FROM pragma_table_info('" + table + "') WHERE name = '" + column + "'");
  if (found == version && columns == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "schema version " << found << " (expected " << version << "), " << columns
                                       << " columns " << table << "." << column << " (expected 0)";
}

TEST(SchemaTest, AFreshDatabaseHasTheCurrentVersion) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  EXPECT_EQ(TuningDb::open(path).schema_version(), kSchemaVersion);
  RawDb raw(path);
  EXPECT_EQ(raw.scalar("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM pragma_table_info('measurements') WHERE name IN ('spread_ms', "
                       "'attune_version')"),
            2);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM pragma_table_info('measurements') WHERE name = 'error'"), 1);
  for (const char* table : {"problems", "best"}) {
    EXPECT_EQ(raw.scalar(std::string("SELECT count(*) FROM pragma_table_info('") + table +
                         "') WHERE name = 'modifiers' AND \"notnull\" = 1 AND dflt_value = '''none'''"),
              1)
        << table;
  }
}

TEST(SchemaTest, VersionOneMigratesAndKeepsItsRows) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  create_schema_for_test(path, 1);
  ASSERT_TRUE(is_old_schema(path, 1, "measurements", "spread_ms"));
  // Rows as an attune of schema 1 wrote them.
  RawDb(path).exec(
      "INSERT INTO devices VALUES (1, 'NVIDIA H200/cc9.0/sm132', 'NVIDIA H200', 9, 0, 132, '580.65', '13.0');"
      "INSERT INTO templates VALUES (1, 'flash_fwd', 'hash-a');"
      "INSERT INTO variants VALUES (1, 1, 'flash_fwd/d128.bm128.bn64.wm4.wn1.st2');"
      "INSERT INTO problems VALUES (1, 'fwd', 'bf16', 128, 128, 'causal-bottom-right', 10, 12, 5, 1024, 4096, 2, "
      "16, 4);"
      "INSERT INTO compile_results VALUES (1, 1, 'bf16', 'sm_90a', '13.0', 1, 168, 0, 98304, 1.5, '', "
      "'2025-01-02T03:04:05.000Z');"
      "INSERT INTO measurements VALUES (1, 1, 1, 1, 1, 0.8, 50, 300.0, 0.001, '2025-01-02T03:04:06.000Z', "
      "'580.65', '13.0');"
      "INSERT INTO best VALUES (1, 'fwd', 'bf16', 128, 128, 'causal-bottom-right', 10, 12, 5, 1, 1, 0.8);");

  TuningDb db = TuningDb::open(path);
  EXPECT_EQ(db.schema_version(), kSchemaVersion);
  const std::vector<BestRow> best = db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].key, problem_record().key);
  EXPECT_EQ(best[0].variant_id, kVariant);
  EXPECT_DOUBLE_EQ(best[0].median_ms, 0.8);

  const std::vector<MeasurementRow> rows = db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].median_ms, 0.8);
  EXPECT_EQ(rows[0].tflops, 300.0);
  EXPECT_EQ(rows[0].measured_at, "2025-01-02T03:04:06.000Z");
  EXPECT_FALSE(rows[0].spread_ms);  // unknown before schema 2
  EXPECT_FALSE(rows[0].attune_version);
  EXPECT_TRUE(db.verify().ok());

  // The old rows keep their ids and take part in new writes.
  const DeviceRowId device = db.upsert_device(h200());
  EXPECT_EQ(device.value, 1);
  const TemplateRowId tmpl = db.upsert_template("flash_fwd", "hash-a");
  EXPECT_EQ(db.upsert_variant(tmpl, kVariant).value, 1);
  const ProblemRowId problem = db.upsert_problem(problem_record());
  EXPECT_EQ(problem.value, 1);
  ASSERT_TRUE(db.find_compile({1}, "bf16", "sm_90a", "13.0"));
  EXPECT_EQ(db.find_compile({1}, "bf16", "sm_90a", "13.0")->registers, 168);
  EXPECT_FALSE(db.record_measurement(measurement(device, problem, {1}, 0.1)));  // measured under schema 1
  const VariantRowId faster = db.upsert_variant(tmpl, "flash_fwd/d128.bm64.bn64.wm4.wn1.st2");
  ASSERT_TRUE(db.record_measurement(measurement(device, problem, faster, 0.5)));
  EXPECT_EQ(db.best_for_device(h200().key).at(0).variant_id, "flash_fwd/d128.bm64.bn64.wm4.wn1.st2");
  EXPECT_EQ(db.measurements(h200().key, problem_record().key).at(0).spread_ms, 0.005);
  EXPECT_TRUE(db.verify().ok());
}

// Rows as an attune of schema 3 wrote them: one problem key measured at
// two exact sizes (one ok, one failed) and its best row.
void insert_schema_three_rows(const fs::path& path) {
  RawDb(path).exec(
      "INSERT INTO devices VALUES (1, 'NVIDIA H200/cc9.0/sm132', 'NVIDIA H200', 9, 0, 132, '580.65', '13.0');"
      "INSERT INTO templates VALUES (1, 'flash_fwd', 'hash-a');"
      "INSERT INTO variants VALUES (1, 1, 'flash_fwd/d128.bm128.bn64.wm4.wn1.st2');"
      "INSERT INTO variants VALUES (2, 1, 'flash_fwd/d128.bm64.bn64.wm4.wn1.st2');"
      "INSERT INTO problems(id, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, "
      "batch_heads_log2, seqlen_q, seqlen_k, batch, heads_q, heads_kv) VALUES "
      "(3, 'fwd', 'bf16', 128, 128, 'causal-bottom-right', 10, 12, 5, 1024, 4096, 2, 16, 4), "
      "(7, 'fwd', 'bf16', 128, 128, 'causal-bottom-right', 10, 12, 5, 1000, 4096, 2, 16, 4);"
      "INSERT INTO measurements(id, device, problem, variant, ok, median_ms, repetitions, tflops, max_error, "
      "measured_at, driver_version, nvrtc_version, spread_ms, attune_version, error) VALUES "
      "(1, 1, 3, 1, 1, 0.8, 50, 300.0, 0.001, '2025-01-02T03:04:06.000Z', '580.65', '13.0', 0.01, '0.1.0', NULL), "
      "(2, 1, 7, 2, 0, NULL, 50, NULL, 0.5, '2025-01-02T03:04:07.000Z', '580.65', '13.0', NULL, '0.1.0', "
      "'wrong result: max error 0.5');"
      "INSERT INTO best VALUES (1, 'fwd', 'bf16', 128, 128, 'causal-bottom-right', 10, 12, 5, 1, 1, 0.8);");
}

TEST(SchemaTest, VersionThreeMigratesToNoModifiersAndKeepsItsRows) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  create_schema_for_test(path, 3);
  ASSERT_TRUE(is_old_schema(path, 3, "problems", "modifiers"));
  insert_schema_three_rows(path);

  TuningDb db = TuningDb::open(path);
  EXPECT_EQ(db.schema_version(), 4);
  {
    RawDb raw(path);
    EXPECT_EQ(raw.column("SELECT id || ' ' || modifiers FROM problems ORDER BY id"), "3 none\n7 none\n");
    EXPECT_EQ(raw.column("SELECT measurement || ' ' || modifiers FROM best"), "1 none\n");
    EXPECT_EQ(raw.scalar("SELECT count(*) FROM measurements"), 2);
  }
  EXPECT_TRUE(db.verify().ok());  // foreign_key_check included: the rebuilt tables kept their ids

  const std::vector<BestRow> best = db.best_for_device(h200().key);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].key, problem_record().key);
  EXPECT_EQ(best[0].key.modifiers, 0);
  EXPECT_EQ(best[0].variant_id, kVariant);
  const std::vector<MeasurementRow> rows = db.measurements(h200().key, problem_record().key);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].problem, problem_record());
  EXPECT_EQ(rows[1].error, "wrong result: max error 0.5");

  // The old rows are found by their keys, and the new key identity holds:
  // the same sizes with a modifier are another problem row and another best.
  EXPECT_EQ(db.upsert_problem(problem_record()).value, 3);
  EXPECT_EQ(db.upsert_problem(problem_record(10, 1000)).value, 7);
  ProblemRecord softcap = problem_record();
  softcap.key.modifiers = kModSoftcap;
  const ProblemRowId with_softcap = db.upsert_problem(softcap);
  EXPECT_NE(with_softcap.value, 3);
  ASSERT_TRUE(db.record_measurement(measurement({1}, with_softcap, {2}, 0.5)));
  EXPECT_EQ(db.best_for_device(h200().key).size(), 2u);
  EXPECT_EQ(db.measurements(h200().key, problem_record().key).at(0).median_ms, 0.8);
  EXPECT_TRUE(db.verify().ok());
}

TEST(SchemaTest, ForeignKeysAreEnforcedAgainAfterAMigration) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  create_schema_for_test(path, 3);
  insert_schema_three_rows(path);
  TuningDb db = TuningDb::open(path);
  // There is no problem 99: migrate() turned foreign keys off only for its steps.
  EXPECT_THROW(db.record_measurement(measurement({1}, {99}, {1}, 1.0)), DbError);
  EXPECT_EQ(RawDb(path).scalar("SELECT count(*) FROM measurements"), 2);
}

TEST(SchemaTest, AMigrationLeavingADanglingReferenceIsRolledBack) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  create_schema_for_test(path, 3);
  insert_schema_three_rows(path);
  RawDb(path).exec(  // foreign keys off, as on any raw connection
      "INSERT INTO measurements(id, device, problem, variant, ok, median_ms, repetitions, measured_at, "
      "driver_version, nvrtc_version) VALUES (3, 1, 42, 1, 1, 0.9, 50, '2025-01-02T03:04:08.000Z', '580.65', "
      "'13.0')");
  const std::string message = attune::testing::error_of<DbError>([&] { (void)TuningDb::open(path); });
  EXPECT_NE(message.find("migrating from schema version 3 to 4: table measurements row 3 refers to a missing row of "
                         "problems"),
            std::string::npos)
      << message;
  EXPECT_TRUE(is_old_schema(path, 3, "problems", "modifiers"));
  EXPECT_EQ(RawDb(path).scalar("SELECT count(*) FROM problems"), 2);
}

TEST(SchemaTest, AMigratedSchemaEqualsAFreshOne) {
  TempDir dir;
  const fs::path fresh = dir.path() / "fresh.db";
  (void)TuningDb::open(fresh);
  for (int version = 1; version < kSchemaVersion; ++version) {
    const fs::path migrated = dir.path() / ("migrated-from-" + std::to_string(version) + ".db");
    create_schema_for_test(migrated, version);
    (void)TuningDb::open(migrated);
    EXPECT_EQ(schema_of(migrated), schema_of(fresh)) << "from version " << version;
    // Opening again changes nothing.
    const std::string before = read_bytes(migrated);
    (void)TuningDb::open(migrated);
    EXPECT_EQ(read_bytes(migrated), before) << "from version " << version;
  }
}

TEST(SchemaTest, ANewerSchemaIsRefusedAndLeftUntouched) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  (void)TuningDb::open(path);
  RawDb(path).exec("PRAGMA user_version = 5");
  const std::string before = read_bytes(path);
  try {
    (void)TuningDb::open(path);
    FAIL() << "expected a DbError";
  } catch (const DbError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("schema version 5 is newer than this attune (4): upgrade attune"), std::string::npos)
        << message;
  }
  EXPECT_EQ(read_bytes(path), before);
}

TEST(SchemaTest, TheOldSchemaHelperRefusesAnExistingFileAndUnknownVersions) {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.db";
  (void)TuningDb::open(path);
  EXPECT_THROW(create_schema_for_test(path, 1), DbError);
  EXPECT_EQ(TuningDb::open(path).schema_version(), kSchemaVersion);
  EXPECT_THROW(create_schema_for_test(dir.path() / "zero.db", 0), DbError);
  EXPECT_THROW(create_schema_for_test(dir.path() / "newer.db", kSchemaVersion + 1), DbError);
  EXPECT_FALSE(fs::exists(dir.path() / "zero.db"));
}

}  // namespace
}  // namespace attune::tuning_db
