// The tuning database: benchmark results per GPU, and the best variant of
// every (device, problem key), in one SQLite file shared by the processes of
// a user. The only code in attune that speaks SQL.
//
// Problem keys are core's typed ProblemKey (stored as text and bucket
// exponents, checked on the way in and out); a small adapter in runtime/
// turns BestRow into TunedSource entries.
//
// Example:
//   auto db = attune::tuning_db::TuningDb::open(attune::tuning_db::TuningDb::default_path());
//   auto device = db.upsert_device({.key = info.key(), .name = info.name, ...});
//   auto tmpl = db.upsert_template("flash_fwd", template_hash);
//   auto variant = db.upsert_variant(tmpl, "flash_fwd/d128.bm128.bn64.wm4.wn1.st2");
//   auto problem = db.upsert_problem(problem_record);
//   if (!db.has_measurement(device, problem, variant)) {
//     db.record_measurement({.device = device, .problem = problem, .variant = variant, .ok = true,
//                            .median_ms = 0.41, ...});
//   }
//   for (const auto& row : db.best_for_device(info.key())) ...
//
// Files: WAL journal, a 10 s busy timeout, foreign keys on. Every write is
// one IMMEDIATE transaction, so concurrent writers (a sweep in each of two
// processes) serialize and lose nothing. A connection is never used across
// fork(): a TuningDb used by another process than the one that opened it
// throws DbError. The methods of one TuningDb may be called from several
// threads (they take an internal mutex).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem_key.h"
#include "tuning_db/error.h"

namespace attune::tuning_db {

// Row ids, typed by the table's tag so a device id cannot be passed as a
// problem id.
template <typename Table>
struct RowId {
  std::int64_t value = 0;
  bool operator==(const RowId&) const = default;
};
using DeviceRowId = RowId<struct DevicesTable>;
using TemplateRowId = RowId<struct TemplatesTable>;
using VariantRowId = RowId<struct VariantsTable>;
using ProblemRowId = RowId<struct ProblemsTable>;

// A GPU model as DeviceInfo describes it. `key` is its identity
// ("NVIDIA H200/cc9.0/sm132"); the versions are the latest seen.
struct DeviceRecord {
  std::string key;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  std::string driver_version;
  std::string nvrtc_version;
  bool operator==(const DeviceRecord&) const = default;
};

// One measured problem: its key and the exact sizes behind it.
struct ProblemRecord {
  ProblemKey key;
  std::int64_t seqlen_q = 0;  // the longest sequence when packed
  std::int64_t seqlen_k = 0;
  std::int64_t batch = 0;
  std::int64_t heads_q = 0;
  std::int64_t heads_kv = 0;
  bool operator==(const ProblemRecord&) const = default;
};

// The outcome of compiling one variant; one row per (variant, dtype, arch,
// NVRTC version), the latest replacing the earlier.
struct CompileRecord {
  VariantRowId variant;
  std::string dtype;
  std::string arch;  // sm_90a
  std::string nvrtc_version;
  bool ok = false;
  int registers = 0;
  std::int64_t spill_bytes = 0;
  std::int64_t shared_bytes = 0;
  double compile_seconds = 0;
  std::string log;
  bool operator==(const CompileRecord&) const = default;
};

// One timing of one variant on one problem and device.
struct MeasurementRecord {
  DeviceRowId device;
  ProblemRowId problem;
  VariantRowId variant;
  bool ok = false;                  // passed the correctness gate; only ok rows can become best
  std::optional<double> median_ms;  // required (> 0) when ok
  std::optional<double> spread_ms;  // e.g. interquartile range
  int repetitions = 0;
  std::optional<double> tflops;
  std::optional<double> max_error;  // against the fp64 reference
  std::string driver_version;
  std::string nvrtc_version;
  std::string attune_version;
  std::string measured_at;  // ISO-8601 UTC; empty: now
  std::string error;        // why it failed (a CUDA error's name, "wrong result: ..."); empty when ok
};

// A stored measurement with the names behind its ids.
struct MeasurementRow {
  std::int64_t id = 0;
  std::string device_key;
  ProblemRecord problem;
  std::string kernel;
  std::string template_hash;
  std::string variant_id;
  bool ok = false;
  std::optional<double> median_ms;
  std::optional<double> spread_ms;  // absent for rows measured before schema 2
  int repetitions = 0;
  std::optional<double> tflops;
  std::optional<double> max_error;
  std::string measured_at;
  std::string driver_version;
  std::string nvrtc_version;
  std::optional<std::string> attune_version;  // absent before schema 2
  std::string error;                          // why it failed; empty when ok and before schema 3
};

// The best variant of one (device, problem key): its fastest ok measurement.
// The template hash lets a reader pass over rows of another template.
struct BestRow {
  std::string device_key;
  ProblemKey key;
  std::string kernel;
  std::string template_hash;
  std::string variant_id;
  double median_ms = 0;
  bool operator==(const BestRow&) const = default;
};

struct VerifyReport {
  std::vector<std::string> problems;  // one line each; empty when sound
  bool ok() const { return problems.empty(); }
};

// What merge_from() took from one file: rows added, and of its
// measurements those already here with the same result (present) and those
// whose (device, problem, variant) was measured here with another result
// (conflicting: the row already here wins, so merging is idempotent and the
// first file given wins among the sources).
struct MergeReport {
  std::int64_t devices = 0;
  std::int64_t templates = 0;
  std::int64_t variants = 0;
  std::int64_t problems = 0;
  std::int64_t compile_results = 0;
  std::int64_t measurements = 0;
  std::int64_t measurements_present = 0;
  std::int64_t measurements_conflicting = 0;
};

// What prune_older_versions() deleted: measurements per attune version
// ("" for measurements that recorded none, or an unreadable one).
struct VersionPruneReport {
  std::int64_t measurements = 0;
  std::map<std::string, std::int64_t> by_version;
};

class TuningDb {
 public:
  // Opens `path`, creating missing parent directories and the file. Checks
  // the file (PRAGMA quick_check) and its schema version before writing
  // anything, then migrates an older schema. Throws DbError for a corrupt
  // file or one of a newer schema, leaving it untouched.
  static TuningDb open(const std::filesystem::path& path);

  // $ATTUNE_TUNING_DB, else $XDG_DATA_HOME/attune/tuning.db, else
  // $HOME/.local/share/attune/tuning.db. Empty or relative XDG_DATA_HOME is
  // ignored, as the XDG spec says.
  static std::filesystem::path default_path();

  TuningDb(TuningDb&&) noexcept;
  TuningDb& operator=(TuningDb&&) noexcept;
  ~TuningDb();

  const std::filesystem::path& path() const;
  int schema_version() const;

  // Each returns the row id of the record, inserting it when missing; a
  // known device gets its versions updated. Throw InvalidArgument for
  // records outside the documented domains.
  DeviceRowId upsert_device(const DeviceRecord& device);
  TemplateRowId upsert_template(std::string_view kernel, std::string_view hash);
  VariantRowId upsert_variant(TemplateRowId template_id, std::string_view variant_id);
  ProblemRowId upsert_problem(const ProblemRecord& problem);

  // Stores a compile outcome, replacing an earlier one of the same variant,
  // dtype, arch and NVRTC version.
  void record_compile(const CompileRecord& result);
  std::optional<CompileRecord> find_compile(VariantRowId variant, std::string_view dtype, std::string_view arch,
                                            std::string_view nvrtc_version) const;

  // Stores one measurement and, when it is ok and faster than the current
  // best of its (device, problem key), makes it the best, in one
  // transaction. Returns false (and changes nothing) when this (device,
  // problem, variant) was measured before: a resumed sweep never measures
  // twice.
  bool record_measurement(const MeasurementRecord& measurement);
  bool has_measurement(DeviceRowId device, ProblemRowId problem, VariantRowId variant) const;

  // The best rows of one device (empty for an unknown device), and of all.
  std::vector<BestRow> best_for_device(const std::string& device_key) const;
  std::vector<BestRow> best_all() const;

  // Every measurement of a device on the problems of one key, ok rows
  // fastest first, then the failed ones.
  std::vector<MeasurementRow> measurements(const std::string& device_key, const ProblemKey& key) const;
  // Every measurement, oldest first (export).
  std::vector<MeasurementRow> all_measurements() const;

  // PRAGMA integrity_check and foreign_key_check, and that every best row is
  // the fastest ok measurement of its key (and every key with an ok
  // measurement has one).
  VerifyReport verify() const;

  // Copies every row of another tuning database into this one, matching
  // rows by their unique keys (never by ids), then recomputes the best rows.
  // The other file is opened read-only and must be sound and of the current
  // schema version. Idempotent: merging the same file again adds nothing.
  MergeReport merge_from(const std::filesystem::path& other);
  // Several files, in order: each is checked (readable, undamaged, this
  // schema version) before any is merged, so a bad one changes nothing.
  std::vector<MergeReport> merge_from(const std::vector<std::filesystem::path>& others);

  // Deletes the variants, compile results and measurements of `kernel`'s
  // templates other than `current_hash` (they are stale), and recomputes
  // the best rows. Returns the number of measurements deleted.
  std::int64_t prune_stale_templates(std::string_view kernel, std::string_view current_hash);

  // Deletes the measurements recorded by attune versions before `oldest_kept`
  // (dotted numbers, compared component by component); a measurement with no
  // readable version counts as older. Newer versions (merged from another
  // machine) are kept. Recomputes the best rows.
  VersionPruneReport prune_older_versions(std::string_view oldest_kept);

 private:
  struct State;
  explicit TuningDb(std::unique_ptr<State> state);
  State& use() const;  // checks the process; throws DbError after fork

  std::unique_ptr<State> state_;
};

}  // namespace attune::tuning_db
