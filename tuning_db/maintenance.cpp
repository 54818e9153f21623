#include "tuning_db/maintenance.h"

#include <optional>
#include <string>
#include <utility>

#include "core/version.h"

#include "tuning_db/error.h"
#include "tuning_db/schema.h"

namespace attune::tuning_db {

namespace fs = std::filesystem;

namespace {

// The fastest ok measurement of every (device, problem key), ties to the
// earliest: what the best table must hold.
constexpr std::string_view kFastest =
    "WITH fastest AS (SELECT device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, "
    "batch_heads_log2, modifiers, variant, id, median_ms FROM (SELECT m.device, p.op, p.dtype, p.head_dim_k, "
    "p.head_dim_v, p.mask, p.seqlen_q_log2, p.seqlen_k_log2, p.batch_heads_log2, p.modifiers, m.variant, m.id, "
    "m.median_ms, row_number() OVER (PARTITION BY m.device, p.op, p.dtype, p.head_dim_k, p.head_dim_v, p.mask, "
    "p.seqlen_q_log2, p.seqlen_k_log2, p.batch_heads_log2, p.modifiers ORDER BY m.median_ms, m.id) AS place FROM "
    "measurements m JOIN problems p ON p.id = m.problem WHERE m.ok = 1) WHERE place = 1) ";

std::string with_fastest(std::string_view sql) { return std::string(kFastest) + std::string(sql); }

// "a.op = b.op AND ... AND a.modifiers = b.modifiers": rows of tables `a`
// and `b` of one problem key.
std::string same_key(std::string_view a, std::string_view b) {
  constexpr std::string_view kKeyColumns[] = {"op",       "dtype",         "head_dim_k",    "head_dim_v",
                                              "mask",     "seqlen_q_log2", "seqlen_k_log2", "batch_heads_log2",
                                              "modifiers"};
  std::string sql;
  for (const std::string_view column : kKeyColumns) {
    sql += std::string(sql.empty() ? "" : " AND ") + std::string(a) + "." + std::string(column) + " = " +
           std::string(b) + "." + std::string(column);
  }
  return sql;
}

std::string describe(const std::string& variant_id, double median_ms) {
  return "\"" + variant_id + "\" at " + std::to_string(median_ms) + " ms";
}

// Another database attached read-only as "src" for the life of the object.
class Attached {
 public:
  Attached(sqlite::Connection& conn, const fs::path& other) : conn_(conn) {
    sqlite::Statement attach(conn, "ATTACH DATABASE ?1 AS src");
    attach.bind(sqlite::file_uri(other, "mode=ro")).run();
  }
  ~Attached() {
    try {
      conn_.exec("DETACH DATABASE src");
    } catch (const DbError&) {  // nothing is pending at this point; a failure would only leak the attachment
    }
  }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  sqlite::Connection& conn_;
};

std::int64_t run_counting(sqlite::Connection& conn, std::string_view sql) {
  sqlite::Statement(conn, sql).run();
  return conn.changes();
}

// Refuses a damaged file or one of another schema version; nothing is written.
void check_attached(sqlite::Connection& conn, const fs::path& other) {
  {
    sqlite::Statement check(conn, "PRAGMA src.quick_check");
    std::string found;
    while (check.step()) {
      if (const std::string line = check.text(0); line != "ok") found += (found.empty() ? "" : "; ") + line;
    }
    if (!found.empty()) throw DbError("quick_check of " + other.string() + " found damage: " + found);
  }
  sqlite::Statement version(conn, "PRAGMA src.user_version");
  version.step();
  if (const int found = version.int32(0); found != kSchemaVersion) {
    throw DbError(other.string() + " has schema version " + std::to_string(found) + "; expected " +
                  std::to_string(kSchemaVersion) +
                  (found > kSchemaVersion ? " (written by a newer attune: merge with that version)"
                                          : " (open it once with this attune to migrate it)"));
  }
}

// The attached file's measurements with the target's row ids; a temporary
// view, so the counts and the insert read one definition.
constexpr const char* kIncoming =
    "CREATE TEMP VIEW incoming AS SELECT md.id AS device, mp.id AS problem, mv.id AS variant, sm.ok, sm.median_ms, "
    "sm.spread_ms, sm.repetitions, sm.tflops, sm.max_error, sm.measured_at, sm.driver_version, sm.nvrtc_version, "
    "sm.attune_version, sm.error, sm.id AS source_id FROM src.measurements sm "
    "JOIN src.devices sd ON sd.id = sm.device JOIN main.devices md ON md.key = sd.key "
    "JOIN src.problems sp ON sp.id = sm.problem JOIN main.problems mp ON mp.op = sp.op AND mp.dtype = sp.dtype "
    "AND mp.head_dim_k = sp.head_dim_k AND mp.head_dim_v = sp.head_dim_v AND mp.mask = sp.mask AND "
    "mp.seqlen_q_log2 = sp.seqlen_q_log2 AND mp.seqlen_k_log2 = sp.seqlen_k_log2 AND mp.batch_heads_log2 = "
    "sp.batch_heads_log2 AND mp.modifiers = sp.modifiers AND mp.seqlen_q = sp.seqlen_q AND mp.seqlen_k = "
    "sp.seqlen_k AND mp.batch = sp.batch AND mp.heads_q = sp.heads_q AND mp.heads_kv = sp.heads_kv "
    "JOIN src.variants sv ON sv.id = sm.variant JOIN src.templates st ON st.id = sv.template "
    "JOIN main.templates mt ON mt.kernel = st.kernel AND mt.hash = st.hash "
    "JOIN main.variants mv ON mv.template = mt.id AND mv.variant_id = sv.variant_id";

// Copies the attached file's rows in; runs inside the caller's transaction.
MergeReport merge_attached(sqlite::Connection& conn) {
  MergeReport report;
  // Ids differ between files: every row is matched by its unique key.
  report.devices = run_counting(
      conn,
      "INSERT INTO main.devices(key, name, compute_major, compute_minor, sm_count, driver_version, nvrtc_version) "
      "SELECT key, name, compute_major, compute_minor, sm_count, driver_version, nvrtc_version FROM src.devices "
      "WHERE true ORDER BY id ON CONFLICT DO NOTHING");
  report.templates = run_counting(conn,
                                  "INSERT INTO main.templates(kernel, hash) SELECT kernel, hash FROM src.templates "
                                  "WHERE true ORDER BY id ON CONFLICT DO NOTHING");
  report.variants = run_counting(
      conn,
      "INSERT INTO main.variants(template, variant_id) SELECT mt.id, sv.variant_id FROM src.variants sv "
      "JOIN src.templates st ON st.id = sv.template JOIN main.templates mt ON mt.kernel = st.kernel AND mt.hash = "
      "st.hash WHERE true ORDER BY sv.id ON CONFLICT DO NOTHING");
  report.problems = run_counting(
      conn,
      "INSERT INTO main.problems(op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, "
      "batch_heads_log2, modifiers, seqlen_q, seqlen_k, batch, heads_q, heads_kv) SELECT op, dtype, head_dim_k, "
      "head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, modifiers, seqlen_q, seqlen_k, batch, "
      "heads_q, heads_kv FROM src.problems WHERE true ORDER BY id ON CONFLICT DO NOTHING");
  report.compile_results = run_counting(
      conn,
      "INSERT INTO main.compile_results(variant, dtype, arch, nvrtc_version, ok, registers, spill_bytes, "
      "shared_bytes, compile_seconds, log, compiled_at) SELECT mv.id, sc.dtype, sc.arch, sc.nvrtc_version, sc.ok, "
      "sc.registers, sc.spill_bytes, sc.shared_bytes, sc.compile_seconds, sc.log, sc.compiled_at FROM "
      "src.compile_results sc JOIN src.variants sv ON sv.id = sc.variant JOIN src.templates st ON st.id = "
      "sv.template JOIN main.templates mt ON mt.kernel = st.kernel AND mt.hash = st.hash JOIN main.variants mv ON "
      "mv.template = mt.id AND mv.variant_id = sv.variant_id WHERE true ORDER BY sc.id ON CONFLICT DO NOTHING");

  conn.exec(kIncoming);
  {
    // A measurement already here: the same result (present) or another one
    // of the same (device, problem, variant) (a conflict; the row here wins).
    sqlite::Statement known(conn,
                            "SELECT count(*), coalesce(sum(i.ok IS mm.ok AND i.median_ms IS mm.median_ms AND "
                            "i.measured_at IS mm.measured_at), 0) FROM incoming i JOIN main.measurements mm ON "
                            "mm.device = i.device AND mm.problem = i.problem AND mm.variant = i.variant");
    known.step();
    report.measurements_present = known.int64(1);
    report.measurements_conflicting = known.int64(0) - known.int64(1);
  }
  report.measurements = run_counting(
      conn,
      "INSERT INTO main.measurements(device, problem, variant, ok, median_ms, spread_ms, repetitions, tflops, "
      "max_error, measured_at, driver_version, nvrtc_version, attune_version, error) SELECT device, problem, "
      "variant, ok, median_ms, spread_ms, repetitions, tflops, max_error, measured_at, driver_version, "
      "nvrtc_version, attune_version, error FROM incoming WHERE true ORDER BY source_id ON CONFLICT DO NOTHING");
  conn.exec("DROP VIEW temp.incoming");
  return report;
}

// "tuning database <target>: merging from <other>: <detail>", the
// connection's own prefix dropped from the detail.
DbError merge_error(sqlite::Connection& conn, const fs::path& other, const std::string& detail) {
  std::string text = detail;
  if (const std::string own = "tuning database " + conn.path().string() + ": "; text.starts_with(own)) {
    text.erase(0, own.size());
  }
  return DbError("tuning database " + conn.path().string() + ": merging from " + other.string() + ": " + text);
}

}  // namespace

ProblemKey read_key(const sqlite::Statement& row, int first) {
  const auto bad = [](const char* field, const std::string& value, const char* expected) {
    return DbError("tuning database: a problem key holds " + std::string(field) + " '" + value + "'; expected " +
                   expected + " (a database from another version of attune?)");
  };
  const std::string op = row.text(first);
  const std::string dtype = row.text(first + 1);
  const std::string mask = row.text(first + 4);
  const std::string modifiers = row.text(first + 8);
  ProblemKey key;
  if (const auto unknown = parse_key_names(op, dtype, mask, key)) {
    throw bad(unknown->field, unknown->value, unknown->expected);
  }
  key.head_dim_k = row.int32(first + 2);
  key.head_dim_v = row.int32(first + 3);
  key.seqlen_q_log2 = static_cast<std::int8_t>(row.int32(first + 5));
  key.seqlen_k_log2 = static_cast<std::int8_t>(row.int32(first + 6));
  key.batch_heads_log2 = static_cast<std::int8_t>(row.int32(first + 7));
  // Only modifier_names' own spelling: "sinks+softcap" would read as the
  // same key yet be another one to SQL.
  if (const auto bits = parse_modifier_names(modifiers); bits && modifier_names(*bits) == modifiers) {
    key.modifiers = *bits;
  } else {
    throw bad("modifiers", modifiers, "none, or softcap, sinks and alibi joined by '+' in that order");
  }
  return key;
}

void recompute_best(sqlite::Connection& conn) {
  static const std::string kInsert = with_fastest(
      "INSERT INTO best(device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, "
      "batch_heads_log2, modifiers, variant, measurement, median_ms) SELECT device, op, dtype, head_dim_k, "
      "head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, modifiers, variant, id, median_ms FROM "
      "fastest");
  sqlite::Statement(conn, "DELETE FROM best").run();
  sqlite::Statement(conn, kInsert).run();
}

VerifyReport verify(sqlite::Connection& conn) {
  VerifyReport report;
  {
    sqlite::Statement integrity(conn, "PRAGMA integrity_check");
    while (integrity.step()) {
      if (const std::string line = integrity.text(0); line != "ok") report.problems.push_back("integrity: " + line);
    }
  }
  {
    sqlite::Statement keys(conn, "PRAGMA foreign_key_check");
    while (keys.step()) {
      report.problems.push_back("table " + keys.text(0) + " row " + std::to_string(keys.int64(1)) +
                                " refers to a missing row of " + keys.text(2));
    }
  }
  if (!report.ok()) return report;  // the checks below assume a sound file

  static const std::string kBestRows = with_fastest(
      "SELECT d.key, b.op, b.dtype, b.head_dim_k, b.head_dim_v, b.mask, b.seqlen_q_log2, b.seqlen_k_log2, "
      "b.batch_heads_log2, b.modifiers, bv.variant_id, b.median_ms, fv.variant_id, f.median_ms, EXISTS (SELECT 1 "
      "FROM measurements m JOIN problems p ON p.id = m.problem WHERE m.id = b.measurement AND m.ok = 1 AND "
      "m.device = b.device AND m.variant = b.variant AND m.median_ms = b.median_ms AND " +
      same_key("p", "b") +
      ") FROM best b JOIN devices d ON d.id = b.device JOIN variants bv ON bv.id = b.variant LEFT JOIN fastest f ON "
      "f.device = b.device AND " +
      same_key("f", "b") + " LEFT JOIN variants fv ON fv.id = f.variant ORDER BY d.key");
  {
    sqlite::Statement rows(conn, kBestRows);
    while (rows.step()) {
      const std::string where = "best row of " + rows.text(0) + " " + read_key(rows, 1).to_string() + " names " +
                                describe(rows.text(10), rows.real(11));
      if (rows.is_null(13)) {
        report.problems.push_back(where + ", but the key has no ok measurement");
      } else if (rows.real(13) < rows.real(11)) {
        report.problems.push_back(where + ", but the fastest ok measurement is " +
                                  describe(rows.text(12), rows.real(13)));
      } else if (rows.int64(14) == 0) {
        report.problems.push_back(where + ", but its measurement is missing, failed or does not match it");
      }
    }
  }
  static const std::string kMissing = with_fastest(
      "SELECT d.key, f.op, f.dtype, f.head_dim_k, f.head_dim_v, f.mask, f.seqlen_q_log2, f.seqlen_k_log2, "
      "f.batch_heads_log2, f.modifiers, fv.variant_id, f.median_ms FROM fastest f JOIN devices d ON d.id = f.device "
      "JOIN variants fv ON fv.id = f.variant WHERE NOT EXISTS (SELECT 1 FROM best b WHERE b.device = f.device AND " +
      same_key("b", "f") + ") ORDER BY d.key");
  {
    sqlite::Statement rows(conn, kMissing);
    while (rows.step()) {
      report.problems.push_back("no best row for " + rows.text(0) + " " + read_key(rows, 1).to_string() +
                                ", whose fastest ok measurement is " + describe(rows.text(10), rows.real(11)));
    }
  }
  return report;
}

std::vector<MergeReport> merge(sqlite::Connection& conn, const std::vector<fs::path>& others) {
  // Every file is checked before anything is written: one damaged or
  // foreign shard leaves the target as it was. (SQLite cannot attach inside
  // a transaction, so each file is then merged in its own; merging is
  // idempotent, so a run interrupted between files is simply rerun.)
  std::vector<bool> same_file;
  for (const fs::path& other : others) {
    std::error_code ec;
    if (!fs::is_regular_file(other, ec))
      throw merge_error(conn, other, "no such file; expected a tuning database file");
    same_file.push_back(fs::equivalent(other, conn.path(), ec));  // every row is already here
    if (same_file.back()) continue;
    try {
      Attached src(conn, other);
      check_attached(conn, other);
    } catch (const DbError& e) {
      throw merge_error(conn, other, e.what());
    }
  }
  std::vector<MergeReport> reports(others.size());
  for (std::size_t i = 0; i < others.size(); ++i) {
    if (same_file[i]) continue;
    try {
      Attached src(conn, others[i]);
      sqlite::Transaction tx(conn);
      reports[i] = merge_attached(conn);
      // Nothing new measured: leave the best rows (and the file) as they are.
      if (reports[i].measurements > 0) recompute_best(conn);
      tx.commit();
    } catch (const DbError& e) {
      throw merge_error(conn, others[i], e.what());
    }
  }
  return reports;
}

std::int64_t prune_stale_templates(sqlite::Connection& conn, std::string_view kernel, std::string_view current_hash) {
  sqlite::Transaction tx(conn);
  sqlite::Statement(conn, "DELETE FROM best").run();  // it refers to the measurements about to go
  sqlite::Statement measurements(conn,
                                 "DELETE FROM measurements WHERE variant IN (SELECT v.id FROM variants v JOIN "
                                 "templates t ON t.id = v.template WHERE t.kernel = ?1 AND t.hash <> ?2)");
  measurements.bind(kernel, current_hash).run();
  const std::int64_t deleted = conn.changes();
  sqlite::Statement(conn,
                    "DELETE FROM compile_results WHERE variant IN (SELECT v.id FROM variants v JOIN templates t ON "
                    "t.id = v.template WHERE t.kernel = ?1 AND t.hash <> ?2)")
      .bind(kernel, current_hash)
      .run();
  sqlite::Statement(conn,
                    "DELETE FROM variants WHERE template IN (SELECT id FROM templates WHERE kernel = ?1 AND hash <> "
                    "?2)")
      .bind(kernel, current_hash)
      .run();
  sqlite::Statement(conn, "DELETE FROM templates WHERE kernel = ?1 AND hash <> ?2").bind(kernel, current_hash).run();
  recompute_best(conn);
  tx.commit();
  return deleted;
}

VersionPruneReport prune_older_versions(sqlite::Connection& conn, const std::vector<long>& oldest_kept) {
  sqlite::Transaction tx(conn);
  // Versions are few and their order is numeric, not textual: decide in C++.
  std::vector<std::optional<std::string>> older;
  {
    sqlite::Statement versions(conn, "SELECT DISTINCT attune_version FROM measurements");
    while (versions.step()) {
      std::optional<std::string> version = versions.optional_text(0);
      const auto parts = version ? parse_version(*version) : std::nullopt;
      if (!parts || version_less(*parts, oldest_kept)) older.push_back(std::move(version));
    }
  }
  VersionPruneReport report;
  if (older.empty()) return report;
  sqlite::Statement(conn, "DELETE FROM best").run();  // it refers to the measurements about to go
  for (const std::optional<std::string>& version : older) {
    sqlite::Statement remove(conn, "DELETE FROM measurements WHERE attune_version IS ?1");
    remove.bind(version).run();
    report.by_version[version.value_or("")] += conn.changes();
    report.measurements += conn.changes();
  }
  recompute_best(conn);
  tx.commit();
  return report;
}

}  // namespace attune::tuning_db
