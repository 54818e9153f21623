// The `attune` command: parses flags and calls the libraries.
#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <iostream>

#include "cli/attention_command.h"
#include "cli/doctor_command.h"
#include "cli/explain_command.h"
#include "cli/merge_states_command.h"
#include "cli/tune_command.h"
#include "cli/tune_worker_command.h"
#include "cli/variants_command.h"
#include "core/error.h"
#include "core/version.h"

namespace {

// This binary's path, for starting workers (argv[0] may be relative or bare).
std::string self_executable(const char* argv0) {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string(argv0) : path.string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attune: autotuned FlashAttention-style kernels"};
  app.set_version_flag("--version", attune::attune_version());
  app.require_subcommand(1);
  attune::cli::AttentionOptions attention;
  CLI::App* attention_cmd = attune::cli::add_attention_command(app, attention);
  attune::cli::VariantsOptions variants;
  const attune::cli::VariantsCommands variants_cmds = attune::cli::add_variants_command(app, variants);
  attune::cli::MergeStatesOptions merge;
  CLI::App* merge_cmd = attune::cli::add_merge_states_command(app, merge);
  attune::cli::ExplainOptions explain;
  CLI::App* explain_cmd = attune::cli::add_explain_command(app, explain);
  CLI::App* doctor_cmd = attune::cli::add_doctor_command(app);
  attune::cli::TuneCommandOptions tune;
  attune::cli::DbCommandOptions db;
  const attune::cli::TuneCommands tune_cmds = attune::cli::add_tune_commands(app, tune, db);
  attune::cli::TuneWorkerOptions worker;
  CLI::App* worker_cmd = attune::cli::add_tune_worker_command(app, worker);
  tune.self = self_executable(argv[0]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as for every other error.
    std::cerr << "attune: error: " << e.what() << " (see 'attune --help')\n";
    return 2;
  }
  try {
    if (attention_cmd->parsed()) attune::cli::run_attention(attention);
    if (variants_cmds.list->parsed()) attune::cli::run_variants_list(variants);
    if (variants_cmds.profile->parsed()) attune::cli::run_variants_profile(variants);
    if (variants_cmds.dump->parsed()) attune::cli::run_variants_dump(variants);
    if (variants_cmds.compile->parsed()) attune::cli::run_variants_compile(variants);
    if (variants_cmds.audit->parsed()) attune::cli::run_variants_audit(variants);
    if (explain_cmd->parsed()) attune::cli::run_explain(explain);
    if (merge_cmd->parsed()) attune::cli::run_merge_states(merge);
    if (doctor_cmd->parsed()) attune::cli::run_doctor();
    if (tune_cmds.tune->parsed()) attune::cli::run_tune(tune);
    if (worker_cmd->parsed()) attune::cli::run_tune_worker(worker);
    if (tune_cmds.db_best->parsed() || tune_cmds.db_devices->parsed() || tune_cmds.db_verify->parsed() ||
        tune_cmds.db_merge->parsed() || tune_cmds.db_report->parsed() || tune_cmds.db_export->parsed() ||
        tune_cmds.db_import->parsed() || tune_cmds.db_problems->parsed() || tune_cmds.db_show->parsed() ||
        tune_cmds.db_prune->parsed()) {
      attune::cli::run_db(tune_cmds, db);
    }
  } catch (const attune::Error& e) {
    std::cerr << "attune: error: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "attune: internal error: " << e.what() << '\n';
    return 3;
  }
  return 0;
}
