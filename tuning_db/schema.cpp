#include "tuning_db/schema.h"

#include <sqlite3.h>

#include <iterator>
#include <string>

#include "tuning_db/error.h"

namespace attune::tuning_db {
namespace {

// Migration i takes a database from version i to version i + 1 and sets
// user_version itself. Never edit a released step: add a new one.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the original schema.
    R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,           -- "NVIDIA H200/cc9.0/sm132"
  name TEXT NOT NULL,
  compute_major INTEGER NOT NULL,
  compute_minor INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  driver_version TEXT NOT NULL,       -- last seen; each measurement keeps its own
  nvrtc_version TEXT NOT NULL
);
CREATE TABLE templates (
  id INTEGER PRIMARY KEY,
  kernel TEXT NOT NULL,               -- "flash_fwd"
  hash TEXT NOT NULL,                 -- hash of the bundled template source
  UNIQUE (kernel, hash)
);
CREATE TABLE variants (
  id INTEGER PRIMARY KEY,
  template INTEGER NOT NULL REFERENCES templates(id),
  variant_id TEXT NOT NULL,           -- "flash_fwd/d128.bm128.bn64.wm4.wn1.st2"
  UNIQUE (template, variant_id)
);
CREATE TABLE problems (
  id INTEGER PRIMARY KEY,
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  head_dim_k INTEGER NOT NULL,
  head_dim_v INTEGER NOT NULL,
  mask TEXT NOT NULL,
  seqlen_q_log2 INTEGER NOT NULL,
  seqlen_k_log2 INTEGER NOT NULL,
  batch_heads_log2 INTEGER NOT NULL,
  seqlen_q INTEGER NOT NULL,          -- exact sizes: recorded, not part of the key
  seqlen_k INTEGER NOT NULL,
  batch INTEGER NOT NULL,
  heads_q INTEGER NOT NULL,
  heads_kv INTEGER NOT NULL,
  UNIQUE (op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2,
          seqlen_q, seqlen_k, batch, heads_q, heads_kv)
);
CREATE TABLE compile_results (
  id INTEGER PRIMARY KEY,
  variant INTEGER NOT NULL REFERENCES variants(id),
  dtype TEXT NOT NULL,
  arch TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  ok INTEGER NOT NULL CHECK (ok IN (0, 1)),
  registers INTEGER NOT NULL,
  spill_bytes INTEGER NOT NULL,
  shared_bytes INTEGER NOT NULL,
  compile_seconds REAL NOT NULL,
  log TEXT NOT NULL,
  compiled_at TEXT NOT NULL,          -- ISO-8601 UTC
  UNIQUE (variant, dtype, arch, nvrtc_version)
);
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  device INTEGER NOT NULL REFERENCES devices(id),
  problem INTEGER NOT NULL REFERENCES problems(id),
  variant INTEGER NOT NULL REFERENCES variants(id),
  ok INTEGER NOT NULL CHECK (ok IN (0, 1)),   -- passed the correctness gate
  median_ms REAL CHECK (ok = 0 OR median_ms > 0),
  repetitions INTEGER NOT NULL,
  tflops REAL,
  max_error REAL,
  measured_at TEXT NOT NULL,          -- ISO-8601 UTC
  driver_version TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  UNIQUE (device, problem, variant)   -- a resumed sweep cannot measure twice
);
-- The fastest ok measurement of each (device, problem key); kept up to date
-- by every write so dispatch reads one indexed range.
CREATE TABLE best (
  device INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  head_dim_k INTEGER NOT NULL,
  head_dim_v INTEGER NOT NULL,
  mask TEXT NOT NULL,
  seqlen_q_log2 INTEGER NOT NULL,
  seqlen_k_log2 INTEGER NOT NULL,
  batch_heads_log2 INTEGER NOT NULL,
  variant INTEGER NOT NULL REFERENCES variants(id),
  measurement INTEGER NOT NULL REFERENCES measurements(id),
  median_ms REAL NOT NULL,
  PRIMARY KEY (device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2)
);
CREATE INDEX measurements_variant ON measurements(variant);
CREATE INDEX measurements_problem ON measurements(problem);
PRAGMA user_version = 1;
)sql",
    // 1 -> 2: timing spread and the attune version beside each measurement
    // (NULL for rows measured before).
    R"sql(
ALTER TABLE measurements ADD COLUMN spread_ms REAL CHECK (spread_ms IS NULL OR spread_ms >= 0);
ALTER TABLE measurements ADD COLUMN attune_version TEXT;
PRAGMA user_version = 2;
)sql",
    // 2 -> 3: why a failed measurement failed ("wrong result: ...",
    // "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS ..."); NULL when ok
    // and for rows measured before.
    R"sql(
ALTER TABLE measurements ADD COLUMN error TEXT;
PRAGMA user_version = 3;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

// Applies migrations from `from` up to `to` inside the caller's transaction.
void apply_migrations(sqlite::Connection& conn, int from, int to) {
  for (int version = from; version < to; ++version) conn.exec(kMigrations[version]);
}

}  // namespace

int read_schema_version(sqlite::Connection& conn) {
  sqlite::Statement query(conn, "PRAGMA user_version");
  query.step();
  return query.int32(0);
}

void check_schema_version(sqlite::Connection& conn, int version) {
  const std::string where = "tuning database " + conn.path().string() + ": ";
  if (version > kSchemaVersion) {
    throw DbError(where + "schema version " + std::to_string(version) + " is newer than this attune (" +
                  std::to_string(kSchemaVersion) + "): upgrade attune");
  }
  if (version < 0) {
    throw DbError(where + "schema version " + std::to_string(version) + " is invalid; expected 0.." +
                  std::to_string(kSchemaVersion));
  }
  if (version == 0) {
    sqlite::Statement tables(conn, "SELECT count(*) FROM sqlite_master");
    tables.step();
    if (tables.int64(0) != 0) {
      throw DbError(where + "holds " + std::to_string(tables.int64(0)) +
                    " schema objects but no attune schema version (user_version 0); expected an empty file or "
                    "an attune tuning database");
    }
  }
}

void migrate(sqlite::Connection& conn) {
  if (read_schema_version(conn) == kSchemaVersion) return;  // the common case: no write lock
  sqlite::Transaction tx(conn);
  const int version = read_schema_version(conn);
  check_schema_version(conn, version);
  apply_migrations(conn, version, kSchemaVersion);
  tx.commit();
}

void create_schema_v1_for_test(const std::filesystem::path& path) {
  if (std::filesystem::exists(path)) {
    throw DbError("create_schema_v1_for_test: " + path.string() + " exists; expected a new path");
  }
  sqlite::Connection conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite::Transaction tx(conn);
  apply_migrations(conn, 0, 1);
  tx.commit();
}

}  // namespace attune::tuning_db
