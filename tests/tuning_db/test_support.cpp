#include "test_support.h"

#include <sqlite3.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace attune::tuning_db::testing {

namespace fs = std::filesystem;

RawDb::RawDb(const fs::path& path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    throw std::runtime_error("raw open of " + path.string() + " failed: " + sqlite3_errmsg(db_));
  }
  sqlite3_busy_timeout(db_, 2000);
}

RawDb::~RawDb() { sqlite3_close(db_); }

void RawDb::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error != nullptr ? error : "?";
    sqlite3_free(error);
    throw std::runtime_error("raw exec of \"" + sql + "\" failed: " + message);
  }
}

std::int64_t RawDb::scalar(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    throw std::runtime_error("raw prepare of \"" + sql + "\" failed: " + sqlite3_errmsg(db_));
  }
  const int rc = sqlite3_step(stmt);
  const std::int64_t value = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) throw std::runtime_error("raw query \"" + sql + "\" returned no row");
  return value;
}

std::string RawDb::column(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    throw std::runtime_error("raw prepare of \"" + sql + "\" failed: " + sqlite3_errmsg(db_));
  }
  std::string out;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    out += text == nullptr ? "NULL" : reinterpret_cast<const char*>(text);
    out += '\n';
  }
  sqlite3_finalize(stmt);
  return out;
}

std::string RawDb::dump() {
  std::string out;
  std::vector<std::string> tables;
  {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", -1, &stmt, nullptr);
    while (sqlite3_step(stmt) == SQLITE_ROW)
      tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    sqlite3_finalize(stmt);
  }
  for (const std::string& table : tables) {
    sqlite3_stmt* stmt = nullptr;
    const std::string sql = "SELECT rowid, * FROM " + table + " ORDER BY rowid";
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      throw std::runtime_error("raw prepare of \"" + sql + "\" failed: " + sqlite3_errmsg(db_));
    }
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      out += table;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        const unsigned char* text = sqlite3_column_text(stmt, i);
        out += '|';
        out += text == nullptr ? "NULL" : reinterpret_cast<const char*>(text);
      }
      out += '\n';
    }
    sqlite3_finalize(stmt);
  }
  return out;
}

namespace {

// A device keyed as the runtime keys it: "<name>/cc<major>.<minor>/sm<count>".
DeviceRecord device_record(const std::string& name, int major, int minor, int sm_count, const std::string& driver,
                           const std::string& nvrtc) {
  return {.key = name + "/cc" + std::to_string(major) + "." + std::to_string(minor) + "/sm" + std::to_string(sm_count),
          .name = name,
          .compute_major = major,
          .compute_minor = minor,
          .sm_count = sm_count,
          .driver_version = driver,
          .nvrtc_version = nvrtc};
}

}  // namespace

DeviceRecord h200() { return device_record("NVIDIA H200", 9, 0, 132, "580.65", "13.0"); }

DeviceRecord a100() { return device_record("NVIDIA A100-SXM4-80GB", 8, 0, 108, "570.10", "12.8"); }

ProblemRecord problem_record(int seqlen_q_log2, std::int64_t seqlen_q) {
  return {.key = {.op = Op::kForward,
                  .dtype = DType::kBF16,
                  .head_dim_k = 128,
                  .head_dim_v = 128,
                  .mask = MaskKind::kCausalBottomRight,
                  .seqlen_q_log2 = static_cast<std::int8_t>(seqlen_q_log2),
                  .seqlen_k_log2 = 12,
                  .batch_heads_log2 = 5},
          .seqlen_q = seqlen_q,
          .seqlen_k = 4096,
          .batch = 2,
          .heads_q = 16,
          .heads_kv = 4};
}

MeasurementRecord measurement(DeviceRowId device, ProblemRowId problem, VariantRowId variant, double median_ms,
                              bool ok) {
  return {.device = device,
          .problem = problem,
          .variant = variant,
          .ok = ok,
          .median_ms = median_ms,
          .spread_ms = median_ms / 100,
          .repetitions = 50,
          .tflops = 1.0 / median_ms,
          .max_error = ok ? 1e-3 : 0.5,
          .driver_version = "580.65",
          .nvrtc_version = "13.0",
          .attune_version = "0.1.0"};
}

}  // namespace attune::tuning_db::testing
