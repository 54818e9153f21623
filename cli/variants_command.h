// `attune variants list|profile|dump`: the valid variants of a problem class
// on an architecture (optionally compiled with NVRTC), one variant's speed
// model, and what one variant compiles to.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace attune::cli {

struct VariantsOptions {
  std::string id;  // profile, dump: the variant
  std::string format = "text";
  int sm_count = 0;      // 0: the architecture's example part
  double clock_ghz = 0;  // 0: the clock its peak is quoted at
  bool no_emulate = false;
  std::string out;  // dump: the directory
  std::string op = "fwd";
  std::string dtype = "bf16";
  int dk = 0;
  int dv = 0;
  std::string arch = "sm_90a";
  bool compile = false;
  int jobs = 0;                  // 0: one per core
  std::string modifiers;         // list: the score modifiers compiled in (none, softcap+sinks, ...)
  std::vector<std::string> ids;  // compile: variant ids, each optionally "@fp16" / "@bf16"
  std::string from;              // compile: a file of ids, one per line ('#' comments)
  std::string cubin;             // audit: any cubin (another library's kernels too)
  std::string function;          // audit: only functions whose mangled name contains it
};

struct VariantsCommands {
  CLI::App* list;
  CLI::App* profile;
  CLI::App* dump;
  CLI::App* compile;
  CLI::App* audit;
};

// Registers `variants list|profile|dump` on `app`.
VariantsCommands add_variants_command(CLI::App& app, VariantsOptions& options);

void run_variants_list(const VariantsOptions& options);
// `attune variants profile ID --arch A`: static resources, SASS mix,
// emulated cost per key tile and the bound (profile/profile.h).
void run_variants_profile(const VariantsOptions& options);
// `attune variants dump ID --arch A --out DIR`: source, PTX, cubin, ptxas log.
void run_variants_dump(const VariantsOptions& options);
// `attune variants compile ID[@DTYPE]... [--from FILE] --arch A`: compiles
// into the kernel cache ($ATTUNE_CACHE_DIR or the default), in parallel, so
// later launches load without compiling (a GPU run compiles everything
// before its first launch). One line per variant; fails when any failed.
void run_variants_compile(const VariantsOptions& options);
// `attune variants audit --cubin FILE [--function TEXT]`: the SASS audit
// (profile/sass_audit.h) of every kernel in a cubin, e.g. one extracted from
// FlashAttention-3's wheel (docs/perf/hopper_forward.md), per function.
void run_variants_audit(const VariantsOptions& options);

}  // namespace attune::cli
