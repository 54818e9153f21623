#include "cli/variants_command.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "cli/problem_flags.h"
#include "core/error.h"
#include "generator/variants.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/jit/kernel_cache.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/jit/nvrtc_library.h"

namespace attune::cli {

VariantsCommands add_variants_command(CLI::App& app, VariantsOptions& o) {
  CLI::App* variants = app.add_subcommand("variants", "Inspect the kernel variant space");
  variants->require_subcommand(1);
  CLI::App* list = variants->add_subcommand("list", "Print the valid variants of a problem class on an architecture");
  list->add_option("--op", o.op, "Operation: fwd, decode or bwd")->capture_default_str();
  list->add_option("--dtype", o.dtype, "Storage dtype: fp16 or bf16")->capture_default_str();
  list->add_option("--dk", o.dk, "Head dim of Q and K (1..256)")->required()->check(CLI::Range(1, 256));
  list->add_option("--dv", o.dv, "Head dim of V (1..256)")->required()->check(CLI::Range(1, 256));
  list->add_option("--arch", o.arch, "GPU architecture: " + known_archs())->capture_default_str();
  list->add_flag("--compile", o.compile, "Compile each variant with NVRTC and print its resources");
  list->add_option("--modifiers", o.modifiers,
                   "Score modifiers compiled in: none, or softcap, sinks, alibi, dropout joined by '+'");
  list->add_option("--jobs", o.jobs, "Parallel compiles (default: one per core)")->check(CLI::Range(0, 256));

  CLI::App* profile =
      variants->add_subcommand("profile", "A variant's resources, SASS mix, emulated cost per key tile and bound");
  profile->add_option("id", o.id, "Variant id (as 'attune variants list' prints it)")->required();
  profile->add_option("--arch", o.arch, "GPU architecture: sm_80, sm_86, sm_89 or sm_90a")->capture_default_str();
  profile->add_option("--dtype", o.dtype, "Storage dtype: fp16 or bf16")->capture_default_str();
  profile->add_option("--format", o.format, "text or json")->capture_default_str();
  profile->add_option("--sm-count", o.sm_count, "SMs of the GPU (default: the architecture's example part)")
      ->check(CLI::Range(1, 4096));
  profile->add_option("--clock-ghz", o.clock_ghz, "SM clock of the GPU in GHz (default: its peak-rate clock)")
      ->check(CLI::Range(0.1, 10.0));
  profile->add_flag("--no-emulate", o.no_emulate,
                    "Only the compiled code (resources and the SASS audit): no emulated cost per key tile, no bound");

  CLI::App* dump = variants->add_subcommand("dump", "Write a variant's bundled source, PTX, cubin and ptxas log");
  dump->add_option("id", o.id, "Variant id")->required();
  dump->add_option("--arch", o.arch, "GPU architecture: " + known_archs())->capture_default_str();
  dump->add_option("--dtype", o.dtype, "Storage dtype: fp16 or bf16")->capture_default_str();
  dump->add_option("--out", o.out, "Directory to write into (created)")->required();
  CLI::App* compile = variants->add_subcommand(
      "compile", "Compile variants into the kernel cache ahead of their first launch, in parallel");
  compile->add_option("ids", o.ids, "Variant ids, each optionally with @fp16 or @bf16 (default: --dtype)");
  compile->add_option("--from", o.from, "A file of such ids, one per line ('#' starts a comment)");
  compile->add_option("--arch", o.arch, "GPU architecture: " + known_archs())->capture_default_str();
  compile->add_option("--dtype", o.dtype, "Storage dtype of ids without @: fp16 or bf16")->capture_default_str();
  compile->add_option("--jobs", o.jobs, "Parallel compiles (default: one per core)")->check(CLI::Range(0, 256));
  CLI::App* audit = variants->add_subcommand(
      "audit", "The SASS audit of every kernel in a cubin: registers and spills per setmaxnreg region, MMA loops");
  audit
      ->add_option("--cubin", o.cubin, "A cubin (sm_90a or sm_80), e.g. from 'attune variants dump' or cuobjdump -xelf")
      ->required();
  audit->add_option("--function", o.function, "Only the functions whose mangled name contains this text");
  audit->add_option("--format", o.format, "text or json")->capture_default_str();
  return {list, profile, dump, compile, audit};
}

void run_variants_list(const VariantsOptions& o) {
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype) throw InvalidArgument("--dtype: got '" + o.dtype + "'; expected fp16 or bf16");
  const ArchLimits arch = require_arch(o.arch);
  const std::vector<Variant> variants =
      enumerate_variants(o.op, *dtype, o.dk, o.dv, arch, modifier_bits(parse_modifiers(o.modifiers, std::nullopt)));
  if (!o.compile) {
    std::printf("%-60s %8s %12s\n", "variant", "threads", "smem_bytes");
    for (const Variant& v : variants) std::printf("%-60s %8d %12d\n", v.id().c_str(), v.threads(), v.shared_bytes());
    std::printf("%zu variants of %s for %s, Dk %d, Dv %d on %s\n", variants.size(), o.op.c_str(),
                std::string(to_string(*dtype)).c_str(), o.dk, o.dv, arch.name.c_str());
    return;
  }
  nvrtc::library();  // no NVRTC: one line here, before any worker starts
  std::vector<CompileResult> results(variants.size());
  std::atomic<std::size_t> next{0};
  const unsigned jobs = o.jobs > 0 ? static_cast<unsigned>(o.jobs) : std::max(1U, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < std::min<std::size_t>(jobs, variants.size()); ++w) {
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < variants.size(); i = next++) {
        const Variant& v = variants[i];
        results[i] = compile_with_nvrtc(v.kernel->source, std::string(v.kernel->name) + ".cu",
                                        v.name_expression(*dtype), arch.name);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  std::printf("%-44s %8s %12s %9s %11s %10s  %s\n", "variant", "threads", "smem_bytes", "registers", "spill_bytes",
              "compile_s", "status");
  int failed = 0;
  int spilling = 0;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const CompileResult& r = results[i];
    const char* status = !r.ok ? "FAILED" : r.spills() ? "spills" : "ok";
    failed += r.ok ? 0 : 1;
    spilling += r.ok && r.spills() ? 1 : 0;
    std::printf("%-44s %8d %12d %9d %11d %10.2f  %s\n", variants[i].id().c_str(), variants[i].threads(),
                variants[i].shared_bytes(), r.registers, r.spill_bytes, r.seconds, status);
    if (!r.ok) std::fprintf(stderr, "%s: NVRTC log:\n%s\n", variants[i].id().c_str(), r.log.c_str());
  }
  std::printf("%zu variants of %s for %s, Dk %d, Dv %d on %s (NVRTC %s): %d failed, %d spill\n", variants.size(),
              o.op.c_str(), std::string(to_string(*dtype)).c_str(), o.dk, o.dv, arch.name.c_str(),
              nvrtc_version().c_str(), failed, spilling);
  if (failed > 0) throw Error(std::to_string(failed) + " variant(s) failed to compile (logs above)");
}

namespace {

// "flash_fwd/d64...@fp16" -> the request; the dtype defaults to `dtype`.
CompileRequest compile_request(const std::string& text, DType dtype, const std::string& arch) {
  std::string id = text;
  if (const std::size_t at = text.rfind('@'); at != std::string::npos) {
    id = text.substr(0, at);
    const auto parsed = parse_dtype(text.substr(at + 1));
    if (!parsed) throw InvalidArgument(text + ": got dtype '" + text.substr(at + 1) + "'; expected fp16 or bf16");
    dtype = *parsed;
  }
  return CompileRequest{.variant = parse_variant_id(id), .dtype = dtype, .arch = arch};
}

}  // namespace

void run_variants_compile(const VariantsOptions& o) {
  const auto dtype = parse_dtype(o.dtype);
  if (!dtype) throw InvalidArgument("--dtype: got '" + o.dtype + "'; expected fp16 or bf16");
  const ArchLimits arch = require_arch(o.arch);
  std::vector<std::string> texts = o.ids;
  if (!o.from.empty()) {
    std::ifstream in(o.from);
    if (!in) throw IoError("--from " + o.from + ": cannot be read");
    for (std::string line; std::getline(in, line);) {
      line = line.substr(0, line.find('#'));
      line.erase(0, line.find_first_not_of(" \t"));
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (!line.empty()) texts.push_back(line);
    }
  }
  if (texts.empty()) throw InvalidArgument("variants compile: no variant ids (give ids or --from FILE)");
  std::vector<CompileRequest> requests;
  requests.reserve(texts.size());
  for (const std::string& text : texts) requests.push_back(compile_request(text, *dtype, arch.name));
  nvrtc::library();  // no NVRTC: one line here, before any worker starts
  KernelCache cache({.directory = KernelCache::default_directory()});
  const unsigned jobs = o.jobs > 0 ? static_cast<unsigned>(o.jobs) : std::max(1U, std::thread::hardware_concurrency());
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  int compiled = 0;
  {
    CompilerService service(&cache, jobs);
    std::vector<std::shared_future<CompilerService::Result>> futures;
    futures.reserve(requests.size());
    for (const CompileRequest& r : requests) futures.push_back(service.compile(r));
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const CompiledKernel& k = *futures[i].get();
      const char* status = !k.ok ? "FAILED" : k.from_cache ? "cached" : "compiled";
      failed += k.ok ? 0 : 1;
      compiled += k.ok && !k.from_cache ? 1 : 0;
      std::printf("%-60s %-5s %9d %11d %8.2f  %s\n", requests[i].variant.id().c_str(),
                  std::string(to_string(requests[i].dtype)).c_str(), k.registers, k.spill_bytes, k.compile_seconds,
                  status);
      std::fflush(stdout);
      if (!k.ok) std::fprintf(stderr, "%s: %s\n", requests[i].variant.id().c_str(), k.log.c_str());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu variants for %s into %s: %d compiled, %zu cached, %d failed in %.1f s (%u jobs, NVRTC %s)\n",
              requests.size(), arch.name.c_str(), cache.directory().string().c_str(), compiled,
              requests.size() - static_cast<std::size_t>(compiled + failed), failed, seconds, jobs,
              nvrtc_version().c_str());
  if (failed > 0) throw Error(std::to_string(failed) + " variant(s) failed to compile (logs above)");
}

}  // namespace attune::cli
