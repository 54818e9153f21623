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
    // 3 -> 4: the score modifiers in use are part of the problem key, as
    // modifier_names() writes them ("none", "softcap+sinks"); older rows had
    // none. The UNIQUE and PRIMARY KEY constraints that say what one key is
    // cannot be altered in place, so problems and best are rebuilt, ids and
    // rows kept (SQLite's create, copy, drop, rename; migrate() runs it with
    // foreign keys off and checks them before committing).
    R"sql(
CREATE TABLE problems_v4 (
  id INTEGER PRIMARY KEY,
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  head_dim_k INTEGER NOT NULL,
  head_dim_v INTEGER NOT NULL,
  mask TEXT NOT NULL,
  seqlen_q_log2 INTEGER NOT NULL,
  seqlen_k_log2 INTEGER NOT NULL,
  batch_heads_log2 INTEGER NOT NULL,
  modifiers TEXT NOT NULL DEFAULT 'none',  -- "none", "softcap", "softcap+sinks+alibi"
  seqlen_q INTEGER NOT NULL,          -- exact sizes: recorded, not part of the key
  seqlen_k INTEGER NOT NULL,
  batch INTEGER NOT NULL,
  heads_q INTEGER NOT NULL,
  heads_kv INTEGER NOT NULL,
  UNIQUE (op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, modifiers,
          seqlen_q, seqlen_k, batch, heads_q, heads_kv)
);
INSERT INTO problems_v4(id, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2,
                        batch_heads_log2, seqlen_q, seqlen_k, batch, heads_q, heads_kv)
  SELECT id, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, seqlen_q,
         seqlen_k, batch, heads_q, heads_kv FROM problems ORDER BY id;
DROP TABLE problems;
ALTER TABLE problems_v4 RENAME TO problems;
CREATE TABLE best_v4 (
  device INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  head_dim_k INTEGER NOT NULL,
  head_dim_v INTEGER NOT NULL,
  mask TEXT NOT NULL,
  seqlen_q_log2 INTEGER NOT NULL,
  seqlen_k_log2 INTEGER NOT NULL,
  batch_heads_log2 INTEGER NOT NULL,
  modifiers TEXT NOT NULL DEFAULT 'none',
  variant INTEGER NOT NULL REFERENCES variants(id),
  measurement INTEGER NOT NULL REFERENCES measurements(id),
  median_ms REAL NOT NULL,
  PRIMARY KEY (device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2,
               modifiers)
);
INSERT INTO best_v4(device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2,
                    variant, measurement, median_ms)
  SELECT device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, variant,
         measurement, median_ms FROM best ORDER BY rowid;
DROP TABLE best;
ALTER TABLE best_v4 RENAME TO best;
PRAGMA user_version = 4;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

// Applies migrations from `from` up to `to` inside the caller's transaction.
void apply_migrations(sqlite::Connection& conn, int from, int to) {
  for (int version = from; version < to; ++version) conn.exec(kMigrations[version]);
}

// Foreign keys off for the life of the object, then as they were. A step
// that rebuilds a table others refer to must drop it, which SQLite refuses
// with them on; and PRAGMA foreign_keys does nothing inside a transaction,
// so this wraps the migration's transaction.
class ForeignKeysOff {
 public:
  explicit ForeignKeysOff(sqlite::Connection& conn) : conn_(conn) {
    sqlite::Statement query(conn, "PRAGMA foreign_keys");
    was_on_ = query.step() && query.int64(0) != 0;
    if (was_on_) conn.exec("PRAGMA foreign_keys = OFF");
  }
  ~ForeignKeysOff() {
    if (!was_on_) return;
    try {
      conn_.exec("PRAGMA foreign_keys = ON");
    } catch (const DbError&) {  // outside any transaction this cannot fail short of a broken connection
    }
  }
  ForeignKeysOff(const ForeignKeysOff&) = delete;
  ForeignKeysOff& operator=(const ForeignKeysOff&) = delete;

 private:
  sqlite::Connection& conn_;
  bool was_on_ = false;
};

// Throws DbError when a row refers to a missing one: what the migration's
// transaction must not commit.
void check_references(sqlite::Connection& conn, int from) {
  sqlite::Statement check(conn, "PRAGMA foreign_key_check");
  if (!check.step()) return;
  throw DbError("tuning database " + conn.path().string() + ": migrating from schema version " + std::to_string(from) +
                " to " + std::to_string(kSchemaVersion) + ": table " + check.text(0) + " row " +
                std::to_string(check.int64(1)) + " refers to a missing row of " + check.text(2) +
                "; expected every reference intact. The migration was rolled back");
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
  const ForeignKeysOff off(conn);
  sqlite::Transaction tx(conn);
  const int version = read_schema_version(conn);
  check_schema_version(conn, version);
  apply_migrations(conn, version, kSchemaVersion);
  check_references(conn, version);
  tx.commit();
  // The table rebuilds of the steps leave free pages; give them back, so the
  // file holds what it stores (best effort: another connection may hold it).
  try {
    conn.exec("VACUUM");
  } catch (const DbError&) {
    // Kept as is: free pages are reused by later writes.
  }
}

void create_schema_for_test(const std::filesystem::path& path, int version) {
  if (version < 1 || version > kSchemaVersion) {
    throw DbError("create_schema_for_test: schema version " + std::to_string(version) + "; expected 1.." +
                  std::to_string(kSchemaVersion));
  }
  if (std::filesystem::exists(path)) {
    throw DbError("create_schema_for_test: " + path.string() + " exists; expected a new path");
  }
  sqlite::Connection conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const ForeignKeysOff off(conn);
  sqlite::Transaction tx(conn);
  apply_migrations(conn, 0, version);
  tx.commit();
}

}  // namespace attune::tuning_db
