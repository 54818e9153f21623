// Helpers shared by the tuning database tests: a temporary directory, raw
// SQLite access behind TuningDb's back, and sample records.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"
#include "tuning_db/tuning_db.h"

struct sqlite3;

namespace attune::tuning_db::testing {

using attune::testing::read_bytes;
using attune::testing::TempDir;

// A plain sqlite3 connection for what a test must do that TuningDb never
// would (tamper with rows, change the version, build old schemas).
class RawDb {
 public:
  explicit RawDb(const std::filesystem::path& path);
  ~RawDb();
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  void exec(const std::string& sql);
  std::int64_t scalar(const std::string& sql);  // first column of the first row
  // The first column of every row, one line each.
  std::string column(const std::string& sql);
  // Every row of every table, one line each, in a fixed order.
  std::string dump();

 private:
  sqlite3* db_ = nullptr;
};

DeviceRecord h200();
DeviceRecord a100();
ProblemRecord problem_record(int seqlen_q_log2 = 10, std::int64_t seqlen_q = 1024);
MeasurementRecord measurement(DeviceRowId device, ProblemRowId problem, VariantRowId variant, double median_ms,
                              bool ok = true);

}  // namespace attune::tuning_db::testing
