// Whole-database jobs of the tuning database: recomputing the best rows,
// checking them, merging another file in, pruning stale templates. Internal
// to tuning_db/; TuningDb's methods of the same names lock and call these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "tuning_db/sqlite.h"
#include "tuning_db/tuning_db.h"

namespace attune::tuning_db {

// Replaces every best row with the fastest ok measurement of its (device,
// problem key); ties go to the earliest measurement, as record_measurement's
// strictly-faster rule does. Runs inside the caller's transaction.
void recompute_best(sqlite::Connection& conn);

// The nine problem-key columns of a row (op .. batch_heads_log2, modifiers),
// starting at `first`, in schema order. Throws DbError for a value this
// attune does not know.
ProblemKey read_key(const sqlite::Statement& row, int first);

VerifyReport verify(sqlite::Connection& conn);
// All files or none: each is checked before any is merged, in one transaction.
std::vector<MergeReport> merge(sqlite::Connection& conn, const std::vector<std::filesystem::path>& others);
std::int64_t prune_stale_templates(sqlite::Connection& conn, std::string_view kernel, std::string_view current_hash);
VersionPruneReport prune_older_versions(sqlite::Connection& conn, const std::vector<long>& oldest_kept);

}  // namespace attune::tuning_db
