#include "tuning_db/tuning_db.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <span>
#include <system_error>
#include <utility>

#include "core/version.h"
#include "tuning_db/maintenance.h"
#include "tuning_db/schema.h"
#include "tuning_db/sqlite.h"

namespace attune::tuning_db {

namespace fs = std::filesystem;

struct TuningDb::State {
  explicit State(const fs::path& path) : conn(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) {}
  sqlite::Connection conn;
  std::mutex mutex;
  pid_t pid = ::getpid();
};

namespace {

// The domains of the mirrored runtime enums (core/problem.h, core/dtype.h,
// runtime/problem_key.h), checked so a typo cannot become a key.
constexpr std::array<std::string_view, 2> kDTypes = {"fp16", "bf16"};
constexpr int kMaxHeadDim = 256;
constexpr int kMaxBucketLog2 = 62;

void check_one_of(std::string_view field, std::string_view value, std::span<const std::string_view> allowed) {
  for (const std::string_view name : allowed) {
    if (value == name) return;
  }
  std::string expected;
  for (const std::string_view name : allowed) expected += (expected.empty() ? "" : ", ") + std::string(name);
  throw InvalidArgument("tuning database: " + std::string(field) + " is \"" + std::string(value) +
                        "\"; expected one of " + expected);
}

void check_range(std::string_view field, std::int64_t value, std::int64_t low, std::int64_t high) {
  if (value < low || value > high) {
    throw InvalidArgument("tuning database: " + std::string(field) + " is " + std::to_string(value) + "; expected " +
                          std::to_string(low) + ".." + std::to_string(high));
  }
}

void check_not_empty(std::string_view field, std::string_view value) {
  if (value.empty()) throw InvalidArgument("tuning database: " + std::string(field) + " is empty");
}

void check_key(const ProblemKey& key) {
  check_range("head_dim_k", key.head_dim_k, 1, kMaxHeadDim);
  check_range("head_dim_v", key.head_dim_v, 1, kMaxHeadDim);
  check_range("seqlen_q_log2", key.seqlen_q_log2, 0, kMaxBucketLog2);
  check_range("seqlen_k_log2", key.seqlen_k_log2, 0, kMaxBucketLog2);
  check_range("batch_heads_log2", key.batch_heads_log2, 0, kMaxBucketLog2);
  // modifier_names would drop an unknown bit, merging its key into another.
  if ((key.modifiers & ~kModKnown) != 0) {
    throw InvalidArgument(
        "tuning database: modifiers is " + std::to_string(key.modifiers) +
        "; expected a combination of kModSoftcap (1), kModSinks (2), kModAlibi (4) and kModDropout (8)");
  }
}

void check_problem(const ProblemRecord& problem) {
  check_key(problem.key);
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  check_range("seqlen_q", problem.seqlen_q, 0, kMax);
  check_range("seqlen_k", problem.seqlen_k, 0, kMax);
  check_range("batch", problem.batch, 0, kMax);
  check_range("heads_q", problem.heads_q, 0, kMax);
  check_range("heads_kv", problem.heads_kv, 0, kMax);
}

void check_time(std::string_view field, const std::optional<double>& ms) {
  if (ms && !(std::isfinite(*ms) && *ms >= 0)) {
    throw InvalidArgument("tuning database: " + std::string(field) + " is " + std::to_string(*ms) +
                          "; expected a finite time >= 0 or none");
  }
}

void check_measurement(const MeasurementRecord& m) {
  check_time("median_ms", m.median_ms);
  check_time("spread_ms", m.spread_ms);
  if (m.ok && !(m.median_ms && *m.median_ms > 0)) {
    throw InvalidArgument("tuning database: an ok measurement needs median_ms > 0; got " +
                          (m.median_ms ? std::to_string(*m.median_ms) : std::string("none")));
  }
  check_range("repetitions", m.repetitions, 0, std::numeric_limits<int>::max());
}

// The id of the first row of a query binding `args`, if any.
template <typename... Args>
std::optional<std::int64_t> select_id(sqlite::Connection& conn, std::string_view sql, const Args&... args) {
  sqlite::Statement query(conn, sql);
  query.bind(args...);
  if (!query.step()) return std::nullopt;
  return query.int64(0);
}

// The id of a row known to be present: just inserted, or there already.
template <typename... Args>
std::int64_t select_existing_id(sqlite::Connection& conn, std::string_view sql, const Args&... args) {
  if (auto id = select_id(conn, sql, args...)) return *id;
  throw DbError("tuning database " + conn.path().string() +
                ": row missing right after inserting it: " + std::string(sql));
}

constexpr const char* kSelectDevice =
    "SELECT id, name, compute_major, compute_minor, sm_count, driver_version, nvrtc_version FROM devices "
    "WHERE key = ?1";
constexpr const char* kSelectTemplate = "SELECT id FROM templates WHERE kernel = ?1 AND hash = ?2";
constexpr const char* kSelectVariant = "SELECT id FROM variants WHERE template = ?1 AND variant_id = ?2";
constexpr const char* kSelectProblem =
    "SELECT id FROM problems WHERE op = ?1 AND dtype = ?2 AND head_dim_k = ?3 AND head_dim_v = ?4 AND mask = ?5 "
    "AND seqlen_q_log2 = ?6 AND seqlen_k_log2 = ?7 AND batch_heads_log2 = ?8 AND modifiers = ?9 AND seqlen_q = ?10 "
    "AND seqlen_k = ?11 AND batch = ?12 AND heads_q = ?13 AND heads_kv = ?14";

// The latest compile result of a (variant, dtype, arch, NVRTC version) replaces the earlier.
constexpr const char* kUpsertCompile =
    "INSERT INTO compile_results(variant, dtype, arch, nvrtc_version, ok, registers, spill_bytes, shared_bytes, "
    "compile_seconds, log, compiled_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
    "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) ON CONFLICT(variant, dtype, arch, nvrtc_version) DO UPDATE SET "
    "ok = excluded.ok, registers = excluded.registers, spill_bytes = excluded.spill_bytes, shared_bytes = "
    "excluded.shared_bytes, compile_seconds = excluded.compile_seconds, log = excluded.log, compiled_at = "
    "excluded.compiled_at";
// A (device, problem, variant) measured before keeps its first measurement.
constexpr const char* kInsertMeasurement =
    "INSERT INTO measurements(device, problem, variant, ok, median_ms, spread_ms, repetitions, tflops, "
    "max_error, measured_at, driver_version, nvrtc_version, attune_version, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
    "?7, ?8, ?9, coalesce(nullif(?10, ''), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), ?11, ?12, ?13, nullif(?14, "
    "'')) "
    "ON CONFLICT(device, problem, variant) DO NOTHING";

constexpr std::string_view kSelectBest =
    "SELECT d.key, b.op, b.dtype, b.head_dim_k, b.head_dim_v, b.mask, b.seqlen_q_log2, b.seqlen_k_log2, "
    "b.batch_heads_log2, b.modifiers, t.kernel, t.hash, v.variant_id, b.median_ms FROM best b JOIN devices d ON "
    "d.id = b.device JOIN variants v ON v.id = b.variant JOIN templates t ON t.id = v.template ";
constexpr std::string_view kOrderBest =
    " ORDER BY d.key, b.op, b.dtype, b.head_dim_k, b.head_dim_v, b.mask, b.seqlen_q_log2, b.seqlen_k_log2, "
    "b.batch_heads_log2, b.modifiers";

std::vector<BestRow> read_best(sqlite::Statement& query) {
  std::vector<BestRow> rows;
  while (query.step()) {
    rows.push_back({.device_key = query.text(0),
                    .key = read_key(query, 1),
                    .kernel = query.text(10),
                    .template_hash = query.text(11),
                    .variant_id = query.text(12),
                    .median_ms = query.real(13)});
  }
  return rows;
}

// quick_check and the schema version; reads only.
// The version and the tables it is compared with, read in one snapshot:
// another process may be creating the schema between two separate reads.
void check_schema_snapshot(sqlite::Connection& conn) {
  sqlite::Transaction snapshot(conn, sqlite::Transaction::Kind::kRead);
  check_schema_version(conn, read_schema_version(conn));
  snapshot.commit();
}

void check_file(sqlite::Connection& conn) {
  {
    sqlite::Statement check(conn, "PRAGMA quick_check");
    std::string found;
    while (check.step()) {
      if (const std::string line = check.text(0); line != "ok") found += (found.empty() ? "" : "; ") + line;
    }
    // SQLite's report spans lines ("*** in database main ***\nPage 9: ..."): the error is one line.
    std::replace(found.begin(), found.end(), '\n', ' ');
    if (!found.empty()) {
      throw DbError("tuning database " + conn.path().string() + ": quick_check found damage: " + found +
                    "; expected \"ok\". The file was left untouched: move it aside or restore a backup");
    }
  }
  check_schema_snapshot(conn);
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

TuningDb::TuningDb(std::unique_ptr<State> state) : state_(std::move(state)) {}
TuningDb::TuningDb(TuningDb&&) noexcept = default;
TuningDb& TuningDb::operator=(TuningDb&&) noexcept = default;

TuningDb::~TuningDb() {
  // A forked child must not close the parent's connection (see abandon()).
  if (state_ && state_->pid != ::getpid()) state_->conn.abandon();
}

TuningDb TuningDb::open(const fs::path& path) {
  if (path.empty()) throw InvalidArgument("tuning database: the path is empty; expected a file path");
  if (path.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) {
      throw DbError("tuning database " + path.string() + ": creating its directory failed: " + ec.message());
    }
  }
  // Nothing is written before the file has been found sound and of a schema
  // we understand, through a read-only connection: a damaged or newer file
  // stays exactly as it was.
  if (fs::exists(path)) {
    sqlite::Connection probe(path, SQLITE_OPEN_READONLY);
    check_file(probe);
  }
  auto state = std::make_unique<State>(path);
  sqlite::Connection& conn = state->conn;
  check_schema_snapshot(conn);  // it may have been replaced meanwhile

  {
    conn.exec_waiting("PRAGMA journal_mode = WAL");
    sqlite::Statement wal(conn, "PRAGMA journal_mode");
    const std::string mode = wal.step() ? wal.text(0) : std::string();
    if (mode != "wal") {
      throw DbError("tuning database " + path.string() + ": journal mode is \"" + mode +
                    "\" after asking for WAL; expected \"wal\" (is the file on a network file system?)");
    }
  }
  conn.exec("PRAGMA synchronous = NORMAL");  // safe with WAL: a crash may lose the last commits, never corrupt
  conn.exec("PRAGMA foreign_keys = ON");
  migrate(conn);
  return TuningDb(std::move(state));
}

fs::path TuningDb::default_path() {
  if (const std::string explicit_path = env("ATTUNE_TUNING_DB"); !explicit_path.empty()) return explicit_path;
  if (const fs::path data = env("XDG_DATA_HOME"); data.is_absolute()) return data / "attune" / "tuning.db";
  if (const std::string home = env("HOME"); !home.empty()) {
    return fs::path(home) / ".local" / "share" / "attune" / "tuning.db";
  }
  throw DbError(
      "tuning database: no default path: ATTUNE_TUNING_DB, XDG_DATA_HOME and HOME are all unset; expected one of "
      "them");
}

TuningDb::State& TuningDb::use() const {
  if (!state_) throw DbError("tuning database: used after being moved from");
  if (state_->pid != ::getpid()) {
    throw DbError("tuning database " + state_->conn.path().string() + ": used in process " +
                  std::to_string(::getpid()) + " but opened in process " + std::to_string(state_->pid) +
                  "; expected each process (a forked child too) to open its own TuningDb");
  }
  return *state_;
}

const fs::path& TuningDb::path() const { return use().conn.path(); }

int TuningDb::schema_version() const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  return read_schema_version(s.conn);
}

DeviceRowId TuningDb::upsert_device(const DeviceRecord& device) {
  check_not_empty("device key", device.key);
  State& s = use();
  std::lock_guard lock(s.mutex);
  {
    // Known and unchanged: no write lock needed.
    sqlite::Statement known(s.conn, kSelectDevice);
    known.bind(device.key);
    if (known.step()) {
      const DeviceRecord stored{.key = device.key,
                                .name = known.text(1),
                                .compute_major = known.int32(2),
                                .compute_minor = known.int32(3),
                                .sm_count = known.int32(4),
                                .driver_version = known.text(5),
                                .nvrtc_version = known.text(6)};
      if (stored == device) return {known.int64(0)};
    }
  }
  sqlite::Transaction tx(s.conn);
  sqlite::Statement insert(s.conn,
                           "INSERT INTO devices(key, name, compute_major, compute_minor, sm_count, driver_version, "
                           "nvrtc_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(key) DO UPDATE SET "
                           "name = excluded.name, compute_major = excluded.compute_major, compute_minor = "
                           "excluded.compute_minor, sm_count = excluded.sm_count, driver_version = "
                           "excluded.driver_version, nvrtc_version = excluded.nvrtc_version");
  insert
      .bind(device.key, device.name, device.compute_major, device.compute_minor, device.sm_count, device.driver_version,
            device.nvrtc_version)
      .run();
  const DeviceRowId id{select_existing_id(s.conn, kSelectDevice, device.key)};
  tx.commit();
  return id;
}

TemplateRowId TuningDb::upsert_template(std::string_view kernel, std::string_view hash) {
  check_not_empty("kernel name", kernel);
  check_not_empty("template hash", hash);
  State& s = use();
  std::lock_guard lock(s.mutex);
  if (auto id = select_id(s.conn, kSelectTemplate, kernel, hash)) return {*id};
  sqlite::Transaction tx(s.conn);
  sqlite::Statement insert(s.conn, "INSERT INTO templates(kernel, hash) VALUES (?1, ?2) ON CONFLICT DO NOTHING");
  insert.bind(kernel, hash).run();
  const TemplateRowId id{select_existing_id(s.conn, kSelectTemplate, kernel, hash)};
  tx.commit();
  return id;
}

VariantRowId TuningDb::upsert_variant(TemplateRowId template_id, std::string_view variant_id) {
  check_not_empty("variant id", variant_id);
  State& s = use();
  std::lock_guard lock(s.mutex);
  if (auto id = select_id(s.conn, kSelectVariant, template_id.value, variant_id)) return {*id};
  sqlite::Transaction tx(s.conn);
  sqlite::Statement insert(s.conn, "INSERT INTO variants(template, variant_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING");
  insert.bind(template_id.value, variant_id).run();
  const VariantRowId id{select_existing_id(s.conn, kSelectVariant, template_id.value, variant_id)};
  tx.commit();
  return id;
}

ProblemRowId TuningDb::upsert_problem(const ProblemRecord& problem) {
  check_problem(problem);
  State& s = use();
  std::lock_guard lock(s.mutex);
  const ProblemKey& k = problem.key;
  const std::string op(to_string(k.op));
  const std::string dtype = storage_name(k.dtype, k.kv_dtype);
  const std::string mask(to_string(k.mask));
  const std::string modifiers = modifier_names(k.modifiers);
  const auto find = [&] {
    return select_id(s.conn, kSelectProblem, op, dtype, k.head_dim_k, k.head_dim_v, mask, k.seqlen_q_log2,
                     k.seqlen_k_log2, k.batch_heads_log2, modifiers, problem.seqlen_q, problem.seqlen_k, problem.batch,
                     problem.heads_q, problem.heads_kv);
  };
  if (auto id = find()) return {*id};
  sqlite::Transaction tx(s.conn);
  sqlite::Statement insert(s.conn,
                           "INSERT INTO problems(op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, "
                           "seqlen_k_log2, batch_heads_log2, modifiers, seqlen_q, seqlen_k, batch, heads_q, "
                           "heads_kv) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) "
                           "ON CONFLICT DO NOTHING");
  insert
      .bind(op, dtype, k.head_dim_k, k.head_dim_v, mask, k.seqlen_q_log2, k.seqlen_k_log2, k.batch_heads_log2,
            modifiers, problem.seqlen_q, problem.seqlen_k, problem.batch, problem.heads_q, problem.heads_kv)
      .run();
  const auto id = find();
  if (!id)
    throw DbError("tuning database " + s.conn.path().string() + ": problem row missing right after inserting it");
  tx.commit();
  return {*id};
}

void TuningDb::record_compile(const CompileRecord& result) {
  check_one_of("compile dtype", result.dtype, kDTypes);
  check_not_empty("compile arch", result.arch);
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Transaction tx(s.conn);
  sqlite::Statement insert(s.conn, kUpsertCompile);
  insert
      .bind(result.variant.value, result.dtype, result.arch, result.nvrtc_version, result.ok, result.registers,
            result.spill_bytes, result.shared_bytes, result.compile_seconds, result.log)
      .run();
  tx.commit();
}

std::optional<CompileRecord> TuningDb::find_compile(VariantRowId variant, std::string_view dtype, std::string_view arch,
                                                    std::string_view nvrtc_version) const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Statement query(s.conn,
                          "SELECT ok, registers, spill_bytes, shared_bytes, compile_seconds, log FROM compile_results "
                          "WHERE variant = ?1 AND dtype = ?2 AND arch = ?3 AND nvrtc_version = ?4");
  query.bind(variant.value, dtype, arch, nvrtc_version);
  if (!query.step()) return std::nullopt;
  return CompileRecord{.variant = variant,
                       .dtype = std::string(dtype),
                       .arch = std::string(arch),
                       .nvrtc_version = std::string(nvrtc_version),
                       .ok = query.int64(0) != 0,
                       .registers = query.int32(1),
                       .spill_bytes = query.int64(2),
                       .shared_bytes = query.int64(3),
                       .compile_seconds = query.real(4),
                       .log = query.text(5)};
}

bool TuningDb::record_measurement(const MeasurementRecord& m) {
  check_measurement(m);
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Transaction tx(s.conn);
  {
    sqlite::Statement insert(s.conn, kInsertMeasurement);
    insert
        .bind(m.device.value, m.problem.value, m.variant.value, m.ok, m.median_ms, m.spread_ms, m.repetitions, m.tflops,
              m.max_error, m.measured_at, m.driver_version, m.nvrtc_version, m.attune_version, m.error)
        .run();
  }
  if (s.conn.changes() == 0) return false;  // measured before; the transaction rolls back (nothing to undo)
  if (m.ok) {
    // Strictly faster replaces, so among equal times the earliest stays.
    sqlite::Statement best(
        s.conn,
        "INSERT INTO best(device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, "
        "batch_heads_log2, modifiers, variant, measurement, median_ms) SELECT ?1, op, dtype, head_dim_k, head_dim_v, "
        "mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, modifiers, ?2, ?3, ?4 FROM problems WHERE id = ?5 "
        "ON CONFLICT(device, op, dtype, head_dim_k, head_dim_v, mask, seqlen_q_log2, seqlen_k_log2, batch_heads_log2, "
        "modifiers) DO UPDATE SET variant = excluded.variant, measurement = excluded.measurement, median_ms = "
        "excluded.median_ms "
        "WHERE excluded.median_ms < best.median_ms");
    best.bind(m.device.value, m.variant.value, s.conn.last_insert_rowid(), m.median_ms, m.problem.value).run();
  }
  tx.commit();
  return true;
}

bool TuningDb::has_measurement(DeviceRowId device, ProblemRowId problem, VariantRowId variant) const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  return select_id(s.conn, "SELECT id FROM measurements WHERE device = ?1 AND problem = ?2 AND variant = ?3",
                   device.value, problem.value, variant.value)
      .has_value();
}

std::vector<BestRow> TuningDb::best_for_device(const std::string& device_key) const {
  static const std::string kSql = std::string(kSelectBest) + "WHERE d.key = ?1" + std::string(kOrderBest);
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Statement query(s.conn, kSql);
  query.bind(device_key);
  return read_best(query);
}

std::vector<BestRow> TuningDb::best_all() const {
  static const std::string kSql = std::string(kSelectBest) + std::string(kOrderBest);
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Statement query(s.conn, kSql);
  return read_best(query);
}

namespace {

// The joined columns of a measurement row, as read_measurement reads them.
constexpr const char* kMeasurementSelect =
    "SELECT m.id, d.key, p.op, p.dtype, p.head_dim_k, p.head_dim_v, p.mask, p.seqlen_q_log2, p.seqlen_k_log2, "
    "p.batch_heads_log2, p.modifiers, p.seqlen_q, p.seqlen_k, p.batch, p.heads_q, p.heads_kv, t.kernel, t.hash, "
    "v.variant_id, "
    "m.ok, m.median_ms, m.spread_ms, m.repetitions, m.tflops, m.max_error, m.measured_at, m.driver_version, "
    "m.nvrtc_version, m.attune_version, m.error FROM measurements m JOIN devices d ON d.id = m.device "
    "JOIN problems p ON p.id = m.problem JOIN variants v ON v.id = m.variant JOIN templates t ON t.id = v.template ";

MeasurementRow read_measurement(sqlite::Statement& query) {
  return {.id = query.int64(0),
          .device_key = query.text(1),
          .problem = {.key = read_key(query, 2),
                      .seqlen_q = query.int64(11),
                      .seqlen_k = query.int64(12),
                      .batch = query.int64(13),
                      .heads_q = query.int64(14),
                      .heads_kv = query.int64(15)},
          .kernel = query.text(16),
          .template_hash = query.text(17),
          .variant_id = query.text(18),
          .ok = query.int64(19) != 0,
          .median_ms = query.optional_real(20),
          .spread_ms = query.optional_real(21),
          .repetitions = query.int32(22),
          .tflops = query.optional_real(23),
          .max_error = query.optional_real(24),
          .measured_at = query.text(25),
          .driver_version = query.text(26),
          .nvrtc_version = query.text(27),
          .attune_version = query.optional_text(28),
          .error = query.optional_text(29).value_or("")};
}

}  // namespace

std::vector<MeasurementRow> TuningDb::measurements(const std::string& device_key, const ProblemKey& key) const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Statement query(
      s.conn, std::string(kMeasurementSelect) +
                  "WHERE d.key = ?1 AND p.op = ?2 AND p.dtype = ?3 AND p.head_dim_k = ?4 AND p.head_dim_v = ?5 AND "
                  "p.mask = ?6 AND p.seqlen_q_log2 = ?7 AND p.seqlen_k_log2 = ?8 AND p.batch_heads_log2 = ?9 AND "
                  "p.modifiers = ?10 ORDER BY m.ok DESC, m.median_ms IS NULL, m.median_ms, m.id");
  query.bind(device_key, std::string(to_string(key.op)), storage_name(key.dtype, key.kv_dtype), key.head_dim_k,
             key.head_dim_v, std::string(to_string(key.mask)), key.seqlen_q_log2, key.seqlen_k_log2,
             key.batch_heads_log2, modifier_names(key.modifiers));
  std::vector<MeasurementRow> rows;
  while (query.step()) rows.push_back(read_measurement(query));
  return rows;
}

std::vector<MeasurementRow> TuningDb::all_measurements() const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  sqlite::Statement query(s.conn, std::string(kMeasurementSelect) + "ORDER BY m.id");
  std::vector<MeasurementRow> rows;
  while (query.step()) rows.push_back(read_measurement(query));
  return rows;
}

VerifyReport TuningDb::verify() const {
  State& s = use();
  std::lock_guard lock(s.mutex);
  return tuning_db::verify(s.conn);
}

MergeReport TuningDb::merge_from(const fs::path& other) { return merge_from(std::vector<fs::path>{other}).front(); }

std::vector<MergeReport> TuningDb::merge_from(const std::vector<fs::path>& others) {
  State& s = use();
  std::lock_guard lock(s.mutex);
  return merge(s.conn, others);
}

std::int64_t TuningDb::prune_stale_templates(std::string_view kernel, std::string_view current_hash) {
  check_not_empty("kernel name", kernel);
  check_not_empty("template hash", current_hash);
  State& s = use();
  std::lock_guard lock(s.mutex);
  return tuning_db::prune_stale_templates(s.conn, kernel, current_hash);
}

VersionPruneReport TuningDb::prune_older_versions(std::string_view oldest_kept) {
  const auto parts = parse_version(oldest_kept);
  if (!parts) {
    throw InvalidArgument("tuning database: attune version to keep from: got \"" + std::string(oldest_kept) +
                          "\"; expected dotted numbers such as 0.1.0");
  }
  State& s = use();
  std::lock_guard lock(s.mutex);
  return tuning_db::prune_older_versions(s.conn, *parts);
}

}  // namespace attune::tuning_db
