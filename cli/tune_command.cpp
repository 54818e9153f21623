#include "cli/tune_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "cli/problem_flags.h"
#include "core/error.h"
#include "core/version.h"
#include "io/atomic_file.h"
#include "runtime/jit/kernel_cache.h"
#include "tuner/exchange.h"
#include "tuner/report.h"
#include "tuner/tuner.h"

namespace attune::cli {

namespace {

std::filesystem::path db_path(const std::string& flag) {
  return flag.empty() ? tuning_db::TuningDb::default_path() : std::filesystem::path(flag);
}

std::string clock_text(double seconds) {
  const auto s = static_cast<long long>(std::lround(seconds));
  char text[32];
  std::snprintf(text, sizeof(text), "%02lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return text;
}

// One line, redrawn in place on a terminal: [#####.....] done/total,
// failures, time left. Into a pipe or file: a line per tenth of the sweep.
void draw_progress(const tuner::Progress& p) {
  static const bool kTerminal = isatty(fileno(stderr)) != 0;
  if (!kTerminal && p.done != p.total && (p.total < 10 || p.done % (p.total / 10) != 0)) return;
  constexpr int kWidth = 30;
  const int filled = p.total == 0 ? kWidth : static_cast<int>(kWidth * p.done / p.total);
  const std::size_t measured_now = p.done - p.skipped;
  const double per_task = measured_now == 0 ? 0 : p.elapsed_seconds / static_cast<double>(measured_now);
  const double left = per_task * static_cast<double>(p.total - p.done);
  std::fprintf(stderr, "%s[%s%s] %zu/%zu  failed %zu  skipped %zu  elapsed %s  left ~%s%s", kTerminal ? "\r" : "",
               std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(), p.done, p.total, p.failed,
               p.skipped, clock_text(p.elapsed_seconds).c_str(), clock_text(left).c_str(), kTerminal ? " " : "\n");
  if (kTerminal && p.done == p.total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

TuneCommands add_tune_commands(CLI::App& app, TuneCommandOptions& t, DbCommandOptions& d) {
  TuneCommands c;
  c.tune =
      app.add_subcommand("tune", "Sweep variants over problems and record every measurement in the tuning database");
  c.tune->add_option("--backend", t.backend, "cuda or emu (emulator timings are kept under its own device key)")
      ->capture_default_str();
  c.tune->add_option("--device", t.device, "CUDA device ordinal")->capture_default_str();
  c.tune->add_option("--db", t.db_path,
                     "Tuning database (default: $ATTUNE_TUNING_DB or ~/.local/share/attune/tuning.db)");
  c.tune->add_option("--sweep", t.sweep_file, "Sweep file (see tuner/sweep.h); flags below override its axes");
  c.tune->add_option("--dtypes,--dtype", t.dtypes, "e.g. bf16,fp16; e4m3 or e5m2: fp8 Q, K and V (forward; O in bf16)");
  c.tune->add_option("--kv-dtype", t.kv_dtype,
                     "e4m3 or e5m2: an fp8 KV cache under the --dtypes queries (fwd and decode; keyed e.g. "
                     "bf16-kv-e4m3)");
  c.tune->add_option("--head-dims", t.head_dims, "Dk = Dv values, e.g. 64,128");
  c.tune->add_option("--masks", t.masks, "none, causal, causal-top-left");
  c.tune->add_option(
      "--modifiers", t.modifiers,
      "Score modifier sets, each tuned under its own key: none, or softcap, sinks, alibi, dropout joined by '+', "
      "e.g. none,softcap,sinks+alibi (default none; ALiBi slopes per query head)");
  c.tune->add_option("--softcap", t.softcap,
                     "c of the problems with softcap (default 30); without --modifiers, where the sweep names no set "
                     "with softcap, the sweep is of softcap alone");
  c.tune->add_option("--dropout", t.dropout,
                     "p of the problems with dropout (default 0.1; fwd and bwd); without --modifiers, where the "
                     "sweep names no set with dropout, the sweep is of dropout alone");
  c.tune->add_option("--seqlens", t.seqlens, "Sq = Sk values, e.g. 128,1024");
  c.tune->add_option("--batch-heads", t.batch_heads, "BxH values, e.g. 1x8,4x16");
  c.tune->add_option("--max-variants", t.max_variants, "Variants per problem class (0: all)");
  c.tune->add_option("--order", t.order,
                     "list (max-variants spread over the list) or model (the speed model's best first, "
                     "as attune variants profile bounds them)");
  c.tune->add_option("--op", t.op, "fwd, bwd, or decode (split-KV over a KV cache; --seqlens are then cache lengths)");
  c.tune->add_option("--queries", t.queries, "Decode: query rows per sequence, e.g. 1,4");
  c.tune->add_option("--gqa", t.gqa, "Decode: query heads per KV head (--batch-heads counts KV heads)");
  c.tune->add_option("--splits", t.splits,
                     "Decode: split counts to time with each variant, e.g. 1,4,16 (auto: the heuristic's)");
  c.tune->add_option("--shard", t.shard, "K/N: this process takes every N-th task from K")->capture_default_str();
  c.tune->add_option("--warmup", t.warmup, "Untimed runs per variant")->capture_default_str();
  c.tune->add_option("--repetitions", t.repetitions, "Timed runs per variant (median recorded)")->capture_default_str();
  c.tune->add_flag("--quiet", t.quiet, "No progress bar");
  c.tune
      ->add_option("--isolate", t.isolate,
                   "Each candidate in its own worker process with a time limit: auto (cuda only), yes, no")
      ->capture_default_str();
  c.tune->add_option("--time-limit", t.time_limit, "Seconds an isolated candidate may take")->capture_default_str();

  CLI::App* db = app.add_subcommand("db", "Inspect the tuning database");
  db->require_subcommand(1);
  db->add_option("--db", d.db_path, "Tuning database (default: $ATTUNE_TUNING_DB or ~/.local/share/attune/tuning.db)");
  c.db_best = db->add_subcommand("best", "The best variant per device and problem key");
  c.db_devices = db->add_subcommand("devices", "The devices measured");
  c.db_verify = db->add_subcommand("verify", "Integrity check; best rows agree with the measurements");
  c.db_merge = db->add_subcommand("merge", "Copy the rows of other databases (shards) into this one");
  c.db_merge->add_option("others", d.merge_from, "The databases to merge from, in order (the first wins a conflict)")
      ->required();
  c.db_export = db->add_subcommand("export", "Every measurement as CSV or JSON");
  c.db_export->add_option("--format", d.format, "csv or json")->capture_default_str();
  c.db_export->add_option("--out", d.out_path, "Output file (default: standard output)");
  c.db_import = db->add_subcommand("import", "Add the measurements of a JSON export");
  c.db_import->add_option("file", d.import_path, "A file written by 'attune db export --format json'")->required();
  c.db_problems = db->add_subcommand("problems", "The measured problem keys");
  for (CLI::App* listing : {c.db_best, c.db_devices, c.db_problems}) {
    listing->add_option("--format", d.list_format, "text (a table) or json (one array, for programs)")
        ->capture_default_str();
  }
  c.db_show = db->add_subcommand("show", "Every measurement of one variant");
  c.db_show->add_option("variant", d.variant, "A variant id")->required();
  c.db_prune = db->add_subcommand("prune",
                                  "Delete measurements of stale template versions and of attune versions before "
                                  "this one (or --keep-from)");
  c.db_prune->add_option("--keep-from", d.keep_from,
                         "Oldest attune version whose measurements are kept (default: this attune's version)");
  c.db_prune->add_flag("--templates-only", d.templates_only, "Prune stale template versions only")
      ->excludes("--keep-from");
  c.db_report = db->add_subcommand("report", "One self-contained HTML page: best variants, timings and gains, plotted");
  c.db_report->add_option("--html", d.html_path, "The page to write")->required();
  return c;
}

void run_tune(const TuneCommandOptions& o) {
  const auto backend = parse_backend(o.backend);
  if (!backend) bad_flag("--backend", o.backend, "cuda or emu");
  tuner::SweepSpec spec = o.sweep_file.empty() ? tuner::SweepSpec{} : tuner::read_sweep_file(o.sweep_file);
  const std::pair<const char*, const std::string*> axes[] = {
      {"dtypes", &o.dtypes},   {"kv_dtype", &o.kv_dtype},   {"head_dims", &o.head_dims},
      {"masks", &o.masks},     {"modifiers", &o.modifiers}, {"softcap", &o.softcap},
      {"dropout", &o.dropout}, {"seqlens", &o.seqlens},     {"batch_heads", &o.batch_heads},
      {"op", &o.op},           {"queries", &o.queries},     {"gqa", &o.gqa},
      {"splits", &o.splits},   {"order", &o.order}};
  for (const auto& [axis, values] : axes) {
    if (!values->empty()) tuner::set_axis(spec, axis, *values);
  }
  if (o.max_variants >= 0) spec.max_variants = o.max_variants;
  const bool any_softcap = std::any_of(spec.modifiers.begin(), spec.modifiers.end(),
                                       [](std::uint8_t bits) { return (bits & kModSoftcap) != 0; });
  if (!o.softcap.empty() && !any_softcap) {
    // A c with nothing to cap: the sets named with it, or softcap alone.
    if (!o.modifiers.empty()) bad_flag("--softcap", o.softcap, "--modifiers naming a set with softcap");
    spec.modifiers = {kModSoftcap};
  }
  const bool any_dropout = std::any_of(spec.modifiers.begin(), spec.modifiers.end(),
                                       [](std::uint8_t bits) { return (bits & kModDropout) != 0; });
  if (!o.dropout.empty() && !any_dropout) {
    // A p with nothing to drop: the sets named with it, or dropout alone.
    if (!o.modifiers.empty()) bad_flag("--dropout", o.dropout, "--modifiers naming a set with dropout");
    spec.modifiers = {kModDropout};
  }
  Runtime runtime({.backend = *backend, .device = o.device});
  tuning_db::TuningDb db = tuning_db::TuningDb::open(db_path(o.db_path));
  if (spec.op != "decode" && (!o.queries.empty() || !o.gqa.empty() || !o.splits.empty())) {
    bad_flag(!o.queries.empty() ? "--queries"
             : !o.gqa.empty()   ? "--gqa"
                                : "--splits",
             !o.queries.empty() ? o.queries
             : !o.gqa.empty()   ? o.gqa
                                : o.splits,
             "--op decode with it");
  }
  const std::vector<tuner::Task> tasks =
      tuner::plan(spec, runtime.arch(), tuner::parse_shard(o.shard), runtime.sm_count());
  std::fprintf(stderr, "attune tune: %zu tasks on %s (%s), database %s\n", tasks.size(), runtime.device_name().c_str(),
               runtime.device_key().c_str(), db.path().c_str());
  if (*backend == Backend::kCuda) {
    // Compile the whole sweep in parallel first; the timed runs load from the cache.
    std::fprintf(stderr, "attune tune: compiling the sweep's variants for %s\n", runtime.arch().name.c_str());
    tuner::precompile(tasks, runtime.arch().name, KernelCache::default_directory(), 0);
  }
  tuner::TuneOptions options{.warmup = o.warmup, .repetitions = o.repetitions};
  if (o.isolate != "auto" && o.isolate != "yes" && o.isolate != "no")
    bad_flag("--isolate", o.isolate, "auto, yes or no");
  if (o.isolate == "yes" || (o.isolate == "auto" && *backend == Backend::kCuda)) {
    // ATTUNE_TUNE_WORKER runs workers through a wrapper (compute-sanitizer,
    // a test's fault injector) that ends by exec'ing `attune tune-worker`.
    const char* wrapper = std::getenv("ATTUNE_TUNE_WORKER");
    options.isolate = tuner::WorkerOptions{.executable = wrapper != nullptr && *wrapper != 0 ? wrapper : o.self,
                                           .time_limit_seconds = o.time_limit,
                                           .backend = o.backend,
                                           .device = o.device};
  }
  if (!o.quiet) options.on_progress = draw_progress;
  const tuner::TuneSummary s = tuner::run_sweep(tasks, runtime, db, options);
  std::printf("tuned %zu, failed %zu, already measured %zu\n", s.measured, s.failed, s.skipped);
}

namespace {

void check_list_format(const DbCommandOptions& o) {
  if (o.list_format != "text" && o.list_format != "json") bad_flag("--format", o.list_format, "text or json");
}

void print_json(const nlohmann::json& rows) { std::printf("%s\n", rows.dump(1).c_str()); }

void db_best(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  check_list_format(o);
  // Gain over the heuristic default, where the default was measured too.
  const std::vector<tuning_db::BestRow> rows = db.best_all();
  if (o.list_format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const tuning_db::BestRow& row : rows) {
      const std::optional<double> gain = tuner::gain_over_default(db, row);
      out.push_back({{"device", row.device_key},
                     {"problem_key", row.key.to_string()},
                     {"variant", row.variant_id},
                     {"median_ms", row.median_ms},
                     {"gain", gain ? nlohmann::json(*gain) : nlohmann::json(nullptr)}});
    }
    print_json(out);
    return;
  }
  if (rows.empty()) {
    std::printf("no tuned problems in %s: run 'attune tune' first\n", db.path().c_str());
    return;
  }
  std::printf("%-28s %-60s %-44s %10s %9s\n", "device", "problem key", "best variant", "ms", "gain");
  for (const tuning_db::BestRow& row : rows) {
    std::string gain = "-";
    if (const std::optional<double> g = tuner::gain_over_default(db, row)) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.2fx", *g);
      gain = text;
    }
    std::printf("%-28s %-60s %-44s %10.3f %9s\n", row.device_key.c_str(), row.key.to_string().c_str(),
                row.variant_id.c_str(), row.median_ms, gain.c_str());
  }
}

void db_devices(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  check_list_format(o);
  std::map<std::string, std::size_t> keys;
  for (const tuning_db::BestRow& row : db.best_all()) ++keys[row.device_key];
  if (o.list_format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [key, count] : keys) out.push_back({{"device", key}, {"tuned_problem_keys", count}});
    print_json(out);
    return;
  }
  for (const auto& [key, count] : keys) std::printf("%-40s %zu tuned problem keys\n", key.c_str(), count);
}

void db_verify(tuning_db::TuningDb& db, const DbCommandOptions& /*options*/) {
  const tuning_db::VerifyReport report = db.verify();
  for (const std::string& problem : report.problems) std::printf("%s\n", problem.c_str());
  if (!report.ok())
    throw Error(db.path().string() + ": verify found " + std::to_string(report.problems.size()) + " problem(s)");
  std::printf("%s: ok (schema %d)\n", db.path().c_str(), db.schema_version());
}

void db_export(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  if (o.format != "csv" && o.format != "json") bad_flag("--format", o.format, "csv or json");
  std::ostringstream text;
  if (o.format == "csv") {
    tuner::export_csv(db, text);
  } else {
    tuner::export_json(db, text);
  }
  if (o.out_path.empty()) {
    std::fputs(text.str().c_str(), stdout);
  } else {
    io::write_file_atomically(o.out_path, text.str());
  }
}

void db_import(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  std::ifstream in(o.import_path);
  if (!in) throw IoError(o.import_path + ": cannot read");
  const std::size_t added = tuner::import_json(db, in);
  std::printf("imported %zu new measurements from %s\n", added, o.import_path.c_str());
}

void db_problems(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  check_list_format(o);
  // (device, key) -> (measurements, failed)
  std::map<std::pair<std::string, std::string>, std::pair<std::size_t, std::size_t>> keys;
  for (const tuning_db::MeasurementRow& m : db.all_measurements()) {
    auto& [count, failed] = keys[{m.device_key, m.problem.key.to_string()}];
    ++count;
    failed += m.ok ? 0 : 1;
  }
  if (o.list_format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [key, counts] : keys) {
      out.push_back({{"device", key.first},
                     {"problem_key", key.second},
                     {"measurements", counts.first},
                     {"failed", counts.second}});
    }
    print_json(out);
    return;
  }
  for (const auto& [key, counts] : keys) {
    std::printf("%-100s %5zu measurements, %zu failed\n", (key.first + "  " + key.second).c_str(), counts.first,
                counts.second);
  }
}

void db_show(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  const Variant variant = parse_variant_id(o.variant);  // a clear error for a malformed id
  std::size_t shown = 0;
  for (const tuning_db::MeasurementRow& m : db.all_measurements()) {
    if (m.variant_id != variant.id()) continue;
    ++shown;
    std::printf("%-28s %-60s %s %10s ms  %8s TFLOP/s  error %s  %s%s%s\n", m.device_key.c_str(),
                m.problem.key.to_string().c_str(), m.ok ? "ok    " : "FAILED",
                m.median_ms ? std::to_string(*m.median_ms).c_str() : "-",
                m.tflops ? std::to_string(*m.tflops).c_str() : "-",
                m.max_error ? std::to_string(*m.max_error).c_str() : "-", m.measured_at.c_str(),
                m.error.empty() ? "" : "  ", m.error.c_str());
  }
  if (shown == 0) std::printf("no measurement of %s in %s\n", variant.id().c_str(), db.path().c_str());
}

void db_prune(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  const std::string keep_from = o.keep_from.empty() ? attune_version() : o.keep_from;
  if (!parse_version(keep_from)) bad_flag("--keep-from", keep_from, "an attune version such as 0.1.0");
  std::int64_t deleted = 0;
  for (const KernelSpec& k : kernel_specs()) deleted += db.prune_stale_templates(k.name, k.source_hash);
  std::printf("pruned %lld measurements of stale template versions\n", static_cast<long long>(deleted));
  if (o.templates_only) return;
  const tuning_db::VersionPruneReport r = db.prune_older_versions(keep_from);
  std::string detail;
  for (const auto& [version, count] : r.by_version) {
    detail += (detail.empty() ? " (" : ", ") + (version.empty() ? std::string("no version") : version) + ": " +
              std::to_string(count);
  }
  if (!detail.empty()) detail += ")";
  std::printf("pruned %lld measurements of attune versions before %s%s\n", static_cast<long long>(r.measurements),
              keep_from.c_str(), detail.c_str());
}

void db_merge(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  const std::vector<std::filesystem::path> others(o.merge_from.begin(), o.merge_from.end());
  const std::vector<tuning_db::MergeReport> reports = db.merge_from(others);
  tuning_db::MergeReport total;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const tuning_db::MergeReport& r = reports[i];
    std::printf(
        "merged %s: %lld measurements added, %lld already present, %lld conflicting (the row already here "
        "kept); %lld problems, %lld variants, %lld devices added\n",
        others[i].c_str(), static_cast<long long>(r.measurements), static_cast<long long>(r.measurements_present),
        static_cast<long long>(r.measurements_conflicting), static_cast<long long>(r.problems),
        static_cast<long long>(r.variants), static_cast<long long>(r.devices));
    total.measurements += r.measurements;
    total.measurements_present += r.measurements_present;
    total.measurements_conflicting += r.measurements_conflicting;
  }
  if (reports.size() > 1) {
    std::printf("merged %zu files: %lld measurements added, %lld already present, %lld conflicting\n", reports.size(),
                static_cast<long long>(total.measurements), static_cast<long long>(total.measurements_present),
                static_cast<long long>(total.measurements_conflicting));
  }
}

void db_report(tuning_db::TuningDb& db, const DbCommandOptions& o) {
  // Replaced atomically, so a reader (a browser reloading the page) never
  // sees half a page.
  const std::filesystem::path target(o.html_path);
  io::write_file_atomically(target, tuner::html_report(db, "attune tuning report"));
  std::printf("%s\n", target.c_str());
}

}  // namespace

void run_db(const TuneCommands& c, const DbCommandOptions& o) {
  tuning_db::TuningDb db = tuning_db::TuningDb::open(db_path(o.db_path));
  // One function per subcommand (smaller functions also keep clang-tidy 16 from crashing).
  const std::pair<CLI::App*, void (*)(tuning_db::TuningDb&, const DbCommandOptions&)> handlers[] = {
      {c.db_best, &db_best},     {c.db_devices, &db_devices},   {c.db_verify, &db_verify}, {c.db_export, &db_export},
      {c.db_import, &db_import}, {c.db_problems, &db_problems}, {c.db_show, &db_show},     {c.db_prune, &db_prune},
      {c.db_merge, &db_merge},   {c.db_report, &db_report},
  };
  for (const auto& [command, handler] : handlers) {
    if (command->parsed()) handler(db, o);
  }
}

}  // namespace attune::cli
