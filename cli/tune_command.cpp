#include "cli/tune_command.h"

#include <cmath>
#include <cstdio>
#include <map>

#include <unistd.h>

#include "cli/problem_flags.h"
#include "core/error.h"
#include "runtime/db_tuned_source.h"
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
  c.tune->add_option("--dtypes", t.dtypes, "e.g. bf16,fp16");
  c.tune->add_option("--head-dims", t.head_dims, "Dk = Dv values, e.g. 64,128");
  c.tune->add_option("--masks", t.masks, "none, causal, causal-top-left");
  c.tune->add_option("--seqlens", t.seqlens, "Sq = Sk values, e.g. 128,1024");
  c.tune->add_option("--batch-heads", t.batch_heads, "BxH values, e.g. 1x8,4x16");
  c.tune->add_option("--max-variants", t.max_variants, "Variants per problem class (0: all)");
  c.tune->add_option("--shard", t.shard, "K/N: this process takes every N-th task from K")->capture_default_str();
  c.tune->add_option("--warmup", t.warmup, "Untimed runs per variant")->capture_default_str();
  c.tune->add_option("--repetitions", t.repetitions, "Timed runs per variant (median recorded)")->capture_default_str();
  c.tune->add_flag("--quiet", t.quiet, "No progress bar");

  CLI::App* db = app.add_subcommand("db", "Inspect the tuning database");
  db->require_subcommand(1);
  db->add_option("--db", d.db_path, "Tuning database (default: $ATTUNE_TUNING_DB or ~/.local/share/attune/tuning.db)");
  c.db_best = db->add_subcommand("best", "The best variant per device and problem key");
  c.db_devices = db->add_subcommand("devices", "The devices measured");
  c.db_verify = db->add_subcommand("verify", "Integrity check; best rows agree with the measurements");
  c.db_merge = db->add_subcommand("merge", "Copy another database's rows into this one");
  c.db_merge->add_option("other", d.merge_from, "The database to merge from")->required();
  return c;
}

void run_tune(const TuneCommandOptions& o) {
  const auto backend = parse_backend(o.backend);
  if (!backend) bad_flag("--backend", o.backend, "cuda or emu");
  tuner::SweepSpec spec = o.sweep_file.empty() ? tuner::SweepSpec{} : tuner::read_sweep_file(o.sweep_file);
  const std::pair<const char*, const std::string*> axes[] = {{"dtypes", &o.dtypes},
                                                             {"head_dims", &o.head_dims},
                                                             {"masks", &o.masks},
                                                             {"seqlens", &o.seqlens},
                                                             {"batch_heads", &o.batch_heads}};
  for (const auto& [axis, values] : axes) {
    if (!values->empty()) tuner::set_axis(spec, axis, *values);
  }
  if (o.max_variants >= 0) spec.max_variants = o.max_variants;
  Runtime runtime({.backend = *backend, .device = o.device});
  tuning_db::TuningDb db = tuning_db::TuningDb::open(db_path(o.db_path));
  const std::vector<tuner::Task> tasks = tuner::plan(spec, runtime.arch(), tuner::parse_shard(o.shard));
  std::fprintf(stderr, "attune tune: %zu tasks on %s (%s), database %s\n", tasks.size(), runtime.device_name().c_str(),
               runtime.device_key().c_str(), db.path().c_str());
  tuner::TuneOptions options{.warmup = o.warmup, .repetitions = o.repetitions};
  if (!o.quiet) options.on_progress = draw_progress;
  const tuner::TuneSummary s = tuner::run_sweep(tasks, runtime, db, options);
  std::printf("tuned %zu, failed %zu, already measured %zu\n", s.measured, s.failed, s.skipped);
}

void run_db(const TuneCommands& c, const DbCommandOptions& o) {
  tuning_db::TuningDb db = tuning_db::TuningDb::open(db_path(o.db_path));
  if (c.db_best->parsed()) {
    // Gain over the heuristic default, where the default was measured too.
    std::printf("%-28s %-60s %-44s %10s %9s\n", "device", "problem key", "best variant", "ms", "gain");
    for (const tuning_db::BestRow& row : db.best_all()) {
      std::string gain = "-";
      const std::optional<ProblemKey> key = to_problem_key(row.key);
      if (key) {
        for (const tuning_db::MeasurementRow& m : db.measurements(row.device_key, row.key)) {
          const Variant heuristic =
              heuristic_variant("fwd", key->dtype, key->head_dim_k, key->head_dim_v, require_arch(kEmulatedArch));
          if (m.ok && m.median_ms && m.variant_id == heuristic.id()) {
            char text[32];
            std::snprintf(text, sizeof(text), "%.2fx", *m.median_ms / row.median_ms);
            gain = text;
            break;
          }
        }
      }
      std::printf("%-28s %-60s %-44s %10.3f %9s\n", row.device_key.c_str(), row.key.to_string().c_str(),
                  row.variant_id.c_str(), row.median_ms, gain.c_str());
    }
  } else if (c.db_devices->parsed()) {
    std::map<std::string, std::size_t> keys;
    for (const tuning_db::BestRow& row : db.best_all()) ++keys[row.device_key];
    for (const auto& [key, count] : keys) std::printf("%-40s %zu tuned problem keys\n", key.c_str(), count);
  } else if (c.db_verify->parsed()) {
    const tuning_db::VerifyReport report = db.verify();
    for (const std::string& problem : report.problems) std::printf("%s\n", problem.c_str());
    if (!report.ok())
      throw Error(db.path().string() + ": verify found " + std::to_string(report.problems.size()) + " problem(s)");
    std::printf("%s: ok (schema %d)\n", db.path().c_str(), db.schema_version());
  } else if (c.db_merge->parsed()) {
    const tuning_db::MergeReport r = db.merge_from(o.merge_from);
    std::printf("merged %s: %lld measurements, %lld problems, %lld variants, %lld devices added\n",
                o.merge_from.c_str(), static_cast<long long>(r.measurements), static_cast<long long>(r.problems),
                static_cast<long long>(r.variants), static_cast<long long>(r.devices));
  }
}

}  // namespace attune::cli
