// Parses one kernel template in CUDA mode with clang, enforces the template
// rules with diagnostics at the offending line, and finds the kernel entry
// points with their tunables.
#pragma once

#include <string>
#include <vector>

#include "generator/kernel_info.h"

namespace attune::gen {

struct AnalysisOptions {
  std::string root;          // project root: templates/ lives below it
  std::string prelude;       // declarations standing in for the CUDA headers
  std::string resource_dir;  // clang's builtin headers
};

struct AnalysisResult {
  bool ok = false;                   // parsed, and no rule broken
  std::vector<KernelInfo> kernels;   // entry points found
  std::vector<std::string> sources;  // every file the template includes
};

// Diagnostics go to stderr in clang's format (file:line:col: error: ...).
AnalysisResult analyze_template(const std::string& path, const AnalysisOptions& options);

}  // namespace attune::gen
