// `attune tune` (a sweep into the tuning database) and `attune db` (inspect it).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace attune::cli {

struct TuneCommandOptions {
  std::string backend = "emu";
  int device = 0;
  std::string db_path;  // empty: TuningDb::default_path()
  std::string sweep_file;
  std::string dtypes, head_dims, masks, seqlens, batch_heads;
  std::string kv_dtype;                  // an fp8 KV cache (empty: the sweep file's or none)
  std::string modifiers, softcap;        // score modifier sets and c (empty: the sweep file's or the default)
  std::string dropout;                   // p of the sets with dropout (empty: the sweep file's or 0.1)
  std::string op, queries, gqa, splits;  // decode sweeps (empty: the sweep file's or the default)
  std::string order;                     // list or model (empty: the sweep file's or list)
  int max_variants = -1;                 // -1: the sweep file's or the default
  std::string shard = "0/1";
  int warmup = 1;
  int repetitions = 5;
  bool quiet = false;
  std::string isolate = "auto";  // auto (cuda: yes, emu: no), yes, no
  double time_limit = 300;       // seconds per isolated candidate
  std::string self;              // the attune binary, for workers
};

struct DbCommandOptions {
  std::string db_path;
  std::vector<std::string> merge_from;
  std::string format = "csv";
  std::string list_format = "text";  // db best, devices, problems: text or json
  std::string out_path;              // empty: stdout
  std::string import_path;
  std::string variant;
  std::string html_path;        // db report --html
  std::string keep_from;        // db prune: oldest attune version kept (empty: this one)
  bool templates_only = false;  // db prune: keep every attune version
};

struct TuneCommands {
  CLI::App* tune = nullptr;
  CLI::App* db_best = nullptr;
  CLI::App* db_devices = nullptr;
  CLI::App* db_verify = nullptr;
  CLI::App* db_merge = nullptr;
  CLI::App* db_export = nullptr;
  CLI::App* db_import = nullptr;
  CLI::App* db_problems = nullptr;
  CLI::App* db_show = nullptr;
  CLI::App* db_prune = nullptr;
  CLI::App* db_report = nullptr;
};

TuneCommands add_tune_commands(CLI::App& app, TuneCommandOptions& tune, DbCommandOptions& db);
void run_tune(const TuneCommandOptions& options);
// Runs whichever `attune db` subcommand was parsed.
void run_db(const TuneCommands& commands, const DbCommandOptions& options);

}  // namespace attune::cli
