// `attune merge-states`: the merge of partial attention results over
// disjoint keys (as `attune attention --out/--lse` writes them) into one.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace attune::cli {

struct MergeStatesOptions {
  std::string backend = "emu";  // emu, cuda, or reference (fp64 on the host)
  std::string o_paths;          // comma-separated O files: [rows, heads, dim] or [1, rows, heads, dim]
  std::string lse_paths;        // comma-separated LSE files: [heads, rows] or [1, heads, rows]
  std::string out_path;
  std::string out_lse_path;  // empty: not written
  std::string dtype = "bf16";
};

CLI::App* add_merge_states_command(CLI::App& app, MergeStatesOptions& options);
// Throws attune::Error on bad input.
void run_merge_states(const MergeStatesOptions& options);

}  // namespace attune::cli
