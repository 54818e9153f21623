// `attune variants list|profile|dump`: the valid variants of a problem class
// on an architecture (optionally compiled with NVRTC), one variant's speed
// model, and what one variant compiles to.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace attune::cli {

struct VariantsOptions {
  std::string id;  // profile, dump: the variant
  std::string format = "text";
  int sm_count = 0;      // 0: the architecture's example part
  double clock_ghz = 0;  // 0: the clock its peak is quoted at
  std::string out;       // dump: the directory
  std::string op = "fwd";
  std::string dtype = "bf16";
  int dk = 0;
  int dv = 0;
  std::string arch = "sm_90a";
  bool compile = false;
  int jobs = 0;           // 0: one per core
  std::string modifiers;  // list: the score modifiers compiled in (none, softcap+sinks, ...)
};

struct VariantsCommands {
  CLI::App* list;
  CLI::App* profile;
  CLI::App* dump;
};

// Registers `variants list|profile|dump` on `app`.
VariantsCommands add_variants_command(CLI::App& app, VariantsOptions& options);

void run_variants_list(const VariantsOptions& options);
// `attune variants profile ID --arch A`: static resources, SASS mix,
// emulated cost per key tile and the bound (profile/profile.h).
void run_variants_profile(const VariantsOptions& options);
// `attune variants dump ID --arch A --out DIR`: source, PTX, cubin, ptxas log.
void run_variants_dump(const VariantsOptions& options);

}  // namespace attune::cli
