// `attune variants profile` and `attune variants dump`: one variant's speed
// model and what it compiles to (declared in cli/variants_command.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/variants_command.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/profile.h"
#include "profile/sass.h"
#include "profile/sass_audit.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/jit/nvrtc_library.h"

namespace attune::cli {

namespace {

using json = nlohmann::json;

DType dtype_of(const std::string& name) {
  const auto dtype = parse_dtype(name);
  if (!dtype) throw InvalidArgument("--dtype: got '" + name + "'; expected fp16 or bf16");
  return *dtype;
}

json to_json(const profile::SassAudit& audit) {
  json regions = json::array();
  for (const profile::SassRegion& r : audit.regions) {
    regions.push_back({{"function", r.function},
                       {"first_address", r.first_address},
                       {"register_limit", r.register_limit},
                       {"highest_register", r.highest_register},
                       {"instructions", r.instructions},
                       {"spill_stores", r.spill_stores},
                       {"spill_loads", r.spill_loads}});
  }
  json loops = json::array();
  for (const profile::SassLoop& l : audit.loops) {
    loops.push_back({{"function", l.function},
                     {"begin_address", l.begin_address},
                     {"end_address", l.end_address},
                     {"instructions", l.instructions},
                     {"mma", l.mma},
                     {"inner_mma_loops", l.inner_mma_loops},
                     {"mma_shapes", l.mma_shapes},
                     {"instructions_per_mma", l.instructions_per_mma},
                     {"classes", l.classes}});
  }
  return {{"regions", regions}, {"mma_loops", loops}};
}

// One line per setmaxnreg region and per MMA loop.
void print_audit(const profile::SassAudit& audit) {
  for (const profile::SassRegion& r : audit.regions) {
    const std::string budget =
        r.register_limit > 0 ? "after setmaxnreg " + std::to_string(r.register_limit) : std::string("entry");
    std::printf("region:   0x%04x %s: %d instructions, highest register R%d, %d STL, %d LDL\n", r.first_address,
                budget.c_str(), r.instructions, r.highest_register, r.spill_stores, r.spill_loads);
  }
  for (const profile::SassLoop& l : audit.loops) {
    std::printf("mma loop: 0x%04x-0x%04x: %d instructions, %d MMA, %.1f per MMA;", l.begin_address, l.end_address,
                l.instructions, l.mma, l.instructions_per_mma);
    for (const auto& [name, count] : l.classes) std::printf(" %s %d", name.c_str(), count);
    if (l.inner_mma_loops > 0)
      std::printf(" (outer: holds %d MMA loop%s)", l.inner_mma_loops, l.inner_mma_loops > 1 ? "s" : "");
    std::printf("\n");
  }
}

json to_json(const profile::VariantProfile& p) {
  const profile::PerKeyTile& t = p.per_key_tile;
  json sites = json::array();
  for (const emu::SiteTraffic& s : t.worst_sites) {
    sites.push_back(
        {{"site", s.site}, {"instructions", s.instructions}, {"wavefronts", s.wavefronts}, {"ideal", s.ideal}});
  }
  json sass = json::object();
  for (const auto& [opcode, count] : p.sass) sass[opcode] = count;
  json out = {{"variant", p.variant},
              {"arch", p.arch},
              {"dtype", std::string(to_string(p.dtype))},
              {"registers", p.resources.registers},
              {"spill_bytes", p.resources.spill_bytes},
              {"shared_bytes", p.resources.shared_bytes},
              {"threads", p.resources.threads},
              {"ctas_per_sm", p.resources.ctas_per_sm},
              {"ctas_limited_by", p.resources.ctas_limited_by},
              {"ptxas_warnings", p.resources.ptxas_warnings},
              {"sass", sass},
              {"sass_audit", to_json(p.sass_audit)},
              {"sass_note", p.sass_note},
              {"emulated", p.emulated}};
  if (!p.emulated) return out;  // --no-emulate: the compiled code only
  out["per_key_tile"] = json{{"mma", t.mma},
                             {"wgmma", t.wgmma},
                             {"wgmma_flops", t.wgmma_flops},
                             {"ldmatrix", t.ldmatrix},
                             {"shared_instructions", t.shared_instructions},
                             {"shuffles", t.shuffles},
                             {"smem_wavefronts", t.smem_wavefronts},
                             {"smem_wavefronts_ideal", t.smem_wavefronts_ideal},
                             {"ex2", t.ex2},
                             {"tanh", t.tanh},
                             {"barriers", t.barriers},
                             {"global_bytes", t.global_bytes},
                             {"flops", t.flops},
                             {"warp_instructions", t.warp_instructions},
                             {"worst_sites", sites},
                             {"problem", t.problem}};
  out["bound"] =
      json{{"limiter", p.bound.limiter},    {"tflops", p.bound.tflops}, {"cycles_per_tile", p.bound.cycles_per_tile},
           {"cycles", p.bound.cycles},      {"sm_count", p.sm_count},   {"clock_ghz", p.clock_ghz},
           {"rates_source", p.rates.source}};
  return out;
}

void print_text(const profile::VariantProfile& p) {
  const profile::PerKeyTile& t = p.per_key_tile;
  std::printf("%s on %s (%s)\n", p.variant.c_str(), p.arch.c_str(), std::string(to_string(p.dtype)).c_str());
  std::printf("static:   %d registers, %d spill bytes, %d shared bytes, %d threads; %d CTAs per SM (limited by %s)\n",
              p.resources.registers, p.resources.spill_bytes, p.resources.shared_bytes, p.resources.threads,
              p.resources.ctas_per_sm, p.resources.ctas_limited_by.c_str());
  for (const std::string& w : p.resources.ptxas_warnings) std::printf("ptxas:    %s\n", w.c_str());
  if (p.sass.empty()) {
    std::printf("sass:     none (%s)\n", p.sass_note.c_str());
  } else {
    std::printf("sass:    ");
    for (const char* op : {"HMMA", "LDSM", "LDS", "STS", "LDGSTS", "MUFU.EX2", "BAR", "SHFL", "LDL", "STL"}) {
      const auto it = p.sass.find(op);
      std::printf(" %s %d", op, it == p.sass.end() ? 0 : it->second);
    }
    if (const auto it = p.sass.find("MUFU.TANH"); it != p.sass.end()) std::printf(" MUFU.TANH %d", it->second);
    int total = 0;
    for (const auto& [op, n] : p.sass) total += op == "MUFU.EX2" || op == "MUFU.TANH" ? 0 : n;
    std::printf(" (of %d instructions)\n", total);
    print_audit(p.sass_audit);
  }
  if (!p.emulated) {
    std::printf("emulated: not run (--no-emulate)\n");
    return;
  }
  std::printf("per key tile of one CTA (%s):\n", t.problem.c_str());
  std::printf(
      "          mma %.0f, ldmatrix %.0f, shared wavefronts %.0f (ideal %.0f, x%.2f), ex2 %.0f, barriers %.0f, "
      "global bytes %.0f\n",
      t.mma, t.ldmatrix, t.smem_wavefronts, t.smem_wavefronts_ideal,
      t.smem_wavefronts_ideal > 0 ? t.smem_wavefronts / t.smem_wavefronts_ideal : 1.0, t.ex2, t.barriers,
      t.global_bytes);
  if (t.tanh > 0) std::printf("          tanh %.0f (softcap, on the MUFU pipe with ex2)\n", t.tanh);
  if (t.wgmma > 0) std::printf("          wgmma %.0f (%.0f FLOPs, per warpgroup)\n", t.wgmma, t.wgmma_flops);
  for (const emu::SiteTraffic& s : t.worst_sites) {
    if (s.wavefronts <= s.ideal) continue;
    std::printf("          %s: %llu wavefronts for an ideal of %llu\n", s.site.c_str(),
                static_cast<unsigned long long>(s.wavefronts), static_cast<unsigned long long>(s.ideal));
  }
  std::printf("cycles per tile on one SM:");
  for (const auto& [name, cycles] : p.bound.cycles) std::printf(" %s %.0f", name.c_str(), cycles);
  std::printf("\nbound:    %s-limited, %.0f TFLOP/s on %d SMs at %.2f GHz\n", p.bound.limiter.c_str(), p.bound.tflops,
              p.sm_count, p.clock_ghz);
}

}  // namespace

void run_variants_profile(const VariantsOptions& o) {
  if (o.format != "text" && o.format != "json") {
    throw InvalidArgument("--format: got '" + o.format + "'; expected text or json");
  }
  const Variant variant = parse_variant_id(o.id);
  profile::ProfileOptions options{.dtype = dtype_of(o.dtype)};
  if (o.sm_count > 0) options.sm_count = o.sm_count;
  if (o.clock_ghz > 0) options.clock_ghz = o.clock_ghz;
  options.emulate = !o.no_emulate;
  const profile::VariantProfile p = profile::profile_variant(variant, o.arch, options);
  if (o.format == "json") {
    std::printf("%s\n", to_json(p).dump(2).c_str());
  } else {
    print_text(p);
  }
}

void run_variants_audit(const VariantsOptions& o) {
  if (o.format != "text" && o.format != "json") {
    throw InvalidArgument("--format: got '" + o.format + "'; expected text or json");
  }
  std::ifstream in(o.cubin, std::ios::binary);
  if (!in) throw InvalidArgument("--cubin: cannot read '" + o.cubin + "'");
  const std::vector<char> cubin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const profile::SassAudit all = profile::audit_sass(profile::disassemble(cubin));
  // Per function, in the order the cubin lists them.
  std::vector<std::string> functions;
  std::map<std::string, profile::SassAudit> by_function;
  for (const profile::SassRegion& r : all.regions) {
    if (r.function.find(o.function) == std::string::npos) continue;
    if (!by_function.contains(r.function)) functions.push_back(r.function);
    by_function[r.function].regions.push_back(r);
  }
  for (const profile::SassLoop& l : all.loops) {
    if (by_function.contains(l.function)) by_function[l.function].loops.push_back(l);
  }
  if (functions.empty())
    throw InvalidArgument("--function: no kernel of " + o.cubin + " contains '" + o.function + "'");
  if (o.format == "json") {
    json out = json::array();
    for (const std::string& f : functions) out.push_back({{"function", f}, {"sass_audit", to_json(by_function[f])}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (const std::string& f : functions) {
    std::printf("function: %s\n", f.c_str());
    print_audit(by_function[f]);
  }
}

void run_variants_dump(const VariantsOptions& o) {
  const Variant variant = parse_variant_id(o.id);
  const DType dtype = dtype_of(o.dtype);
  require_arch(o.arch);
  nvrtc::library();  // no NVRTC: the one line
  const CompileResult c = compile_with_nvrtc(variant.kernel->source, std::string(variant.kernel->name) + ".cu",
                                             variant.name_expression(dtype), o.arch);
  const std::filesystem::path dir(o.out);
  std::filesystem::create_directories(dir);
  io::write_file_atomically(dir / "source.cu", variant.kernel->source);
  io::write_file_atomically(dir / "ptxas.log", c.log + "\n");
  io::write_file_atomically(dir / "kernel.txt", variant.name_expression(dtype) + "\n" + c.lowered_name + "\n");
  if (!c.ok)
    throw Error("compiling " + variant.id() + " for " + o.arch + " failed (log in " + (dir / "ptxas.log").string() +
                ")");
  io::write_file_atomically(dir / "kernel.ptx", c.ptx);
  io::write_file_atomically(dir / "kernel.cubin", std::string_view(c.cubin.data(), c.cubin.size()));
  std::printf("%s: source.cu, kernel.ptx, kernel.cubin, ptxas.log, kernel.txt (%d registers, %d spill bytes)\n",
              dir.c_str(), c.registers, c.spill_bytes);
}

}  // namespace attune::cli
