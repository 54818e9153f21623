// The tuning database's schema: its version (PRAGMA user_version), the
// original DDL and every migration since. A fresh database runs all of them
// in order, so new and upgraded files end up identical and the upgrade path
// is exercised on every creation.
#pragma once

#include <filesystem>

#include "tuning_db/sqlite.h"

namespace attune::tuning_db {

// The schema this attune reads and writes.
inline constexpr int kSchemaVersion = 4;

// PRAGMA user_version of an open connection (reads only).
int read_schema_version(sqlite::Connection& conn);

// Throws DbError when `version` is newer than kSchemaVersion, or when it is 0
// (never initialized) but the file already holds tables of something else.
// Reads only, so a refused file is left as it was.
void check_schema_version(sqlite::Connection& conn, int version);

// Brings the schema up to kSchemaVersion in one IMMEDIATE transaction
// (re-reading the version inside it, since another process may have
// migrated meanwhile). Idempotent. Foreign keys are off while the steps run
// (a step may rebuild a table others refer to) and checked before commit.
void migrate(sqlite::Connection& conn);

// Test only: creates `path` (which must not exist) with the schema of
// `version` (1..kSchemaVersion) and nothing newer, so tests can insert old
// rows and check that opening migrates them.
//   create_schema_for_test(dir / "v3.db", 3);
void create_schema_for_test(const std::filesystem::path& path, int version);

}  // namespace attune::tuning_db
