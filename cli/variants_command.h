// `attune variants list`: the valid variants of a problem class on an
// architecture, optionally compiled with NVRTC.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace attune::cli {

struct VariantsOptions {
  std::string op = "fwd";
  std::string dtype = "bf16";
  int dk = 0;
  int dv = 0;
  std::string arch = "sm_90a";
  bool compile = false;
  int jobs = 0;  // 0: one per core
};

// Registers `variants list` on `app`; returns the `list` subcommand.
CLI::App* add_variants_command(CLI::App& app, VariantsOptions& options);

void run_variants_list(const VariantsOptions& options);

}  // namespace attune::cli
