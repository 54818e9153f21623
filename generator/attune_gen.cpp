// attune-gen: parses the kernel templates with clang in CUDA mode, enforces
// the template rules, and writes the generated registry and emulator
// instantiations that compile the templates into the library.
//
//   attune-gen --root SRC --prelude generator/cuda_prelude.h --resource-dir DIR
//              [--out DIR --shards N] TEMPLATE...
// Without --out it only checks. Exit status 1 when a rule is broken.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <iostream>

#include "generator/bundle.h"
#include "generator/emit.h"
#include "generator/template_analysis.h"

int main(int argc, char** argv) {
  CLI::App app{"attune-gen: check the kernel templates and generate their registry"};
  attune::gen::AnalysisOptions options;
  std::string out_dir;
  int shards = 16;
  std::vector<std::string> templates;
  app.add_option("--root", options.root, "Project root (templates/ lives below it)")->required();
  app.add_option("--prelude", options.prelude, "Declarations standing in for the CUDA headers")->required();
  app.add_option("--resource-dir", options.resource_dir, "clang's resource directory")->required();
  app.add_option("--out", out_dir, "Where to write the generated sources (omit to only check)");
  app.add_option("--shards", shards,
                 "Number of emulator instantiation files (0: none, the kernels do not run on the emulator)")
      ->check(CLI::Range(0, 256));
  app.add_option("templates", templates, "Kernel template files")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<attune::gen::BundledKernel> kernels;
    bool ok = true;
    for (const std::string& path : templates) {
      const attune::gen::AnalysisResult result = attune::gen::analyze_template(path, options);
      if (!result.ok) {
        ok = false;
        continue;
      }
      if (result.kernels.empty()) {
        std::cerr << path << ": error: no kernel entry point (an ATTUNE_KERNEL function template) found\n";
        ok = false;
      }
      const std::string source = attune::gen::bundle_source(path, options.root);
      for (const attune::gen::KernelInfo& kernel : result.kernels) {
        kernels.push_back({kernel, source, attune::gen::content_hash(source)});
      }
    }
    // A field carrying another kernel's tunable must name a real one.
    for (const auto& k : kernels) {
      for (const attune::gen::TunableField& f : k.info.tunable_fields) {
        const auto owner = std::find_if(kernels.begin(), kernels.end(),
                                        [&](const attune::gen::BundledKernel& o) { return o.info.name == f.kernel; });
        if (owner == kernels.end()) {
          std::cerr << f.where << ": error: field '" << f.field << "' of " << k.info.params_type
                    << " carries a tunable of kernel '" << f.kernel << "', which is not a kernel of these templates\n";
          ok = false;
          continue;
        }
        const auto& tunables = owner->info.tunables;
        if (std::none_of(tunables.begin(), tunables.end(),
                         [&](const attune::gen::TunableInfo& t) { return t.name == f.tunable; })) {
          std::string names;
          for (const auto& t : tunables) names += (names.empty() ? "" : ", ") + t.name;
          std::cerr << f.where << ": error: field '" << f.field << "' of " << k.info.params_type << " carries "
                    << f.kernel << "." << f.tunable << ", which is not a tunable of " << f.kernel << " (it has "
                    << names << ")\n";
          ok = false;
        }
      }
    }
    if (!ok) {
      std::cerr << "attune-gen: the templates break the rules above\n";
      return 1;
    }
    if (!out_dir.empty()) attune::gen::emit_sources(kernels, out_dir, shards);
    for (const auto& k : kernels) {
      std::cerr << "attune-gen: " << k.info.qualified_name << " (" << k.info.tunables.size() << " tunables, source "
                << k.hash.substr(0, 12) << ")\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "attune-gen: error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
