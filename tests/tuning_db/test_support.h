// Helpers shared by the tuning database tests: a temporary directory, raw
// SQLite access behind TuningDb's back, and sample records.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tuning_db/tuning_db.h"

struct sqlite3;

namespace attune::tuning_db::testing {

// A fresh directory under the system temp directory, removed afterwards.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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

std::string read_bytes(const std::filesystem::path& path);

DeviceRecord h200();
DeviceRecord a100();
ProblemRecord problem_record(int seqlen_q_log2 = 10, std::int64_t seqlen_q = 1024);
MeasurementRecord measurement(DeviceRowId device, ProblemRowId problem, VariantRowId variant, double median_ms,
                              bool ok = true);

}  // namespace attune::tuning_db::testing
