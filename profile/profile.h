// The speed of a variant, measured without a GPU: what it compiles to (ptxas
// resources, the SASS mix), what one key tile of one CTA costs on the
// emulator (tensor instructions, shared wavefronts by the bank model,
// exponentials, barriers, global bytes), and the throughput bound these give
// at an architecture's documented rates: the resource that limits, and the
// TFLOP/s a full GPU could reach at best.
//
//   const VariantProfile p = profile_variant(parse_variant_id(id), "sm_90a", {.dtype = DType::kBF16});
//   std::printf("%s bound: %.0f TFLOP/s\n", p.bound.limiter.c_str(), p.bound.tflops);
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "emulator/counters.h"
#include "generator/variants.h"
#include "profile/arch_rates.h"
#include "profile/sass.h"
#include "profile/sass_audit.h"

namespace attune::profile {

struct StaticResources {
  int registers = -1;  // per thread, from ptxas
  int spill_bytes = 0;
  int shared_bytes = 0;  // dynamic, per CTA
  int threads = 0;
  int ctas_per_sm = 0;
  std::string ctas_limited_by;  // registers, shared memory, threads or the CTA limit
  std::vector<std::string> ptxas_warnings;
};

// What one key tile of one CTA costs (one query tile against the CTA's keys
// for the backward), from the difference of two emulated runs that differ
// only in the number of tiles: the prologue and epilogue cancel.
struct PerKeyTile {
  double mma = 0;          // warp instructions
  double wgmma = 0;        // warpgroup instructions
  double wgmma_flops = 0;  // what they compute
  double ldmatrix = 0;
  double shared_instructions = 0;  // plain loads, stores, cp.async writes
  double shuffles = 0;
  double smem_wavefronts = 0;
  double smem_wavefronts_ideal = 0;
  double ex2 = 0;   // per thread
  double tanh = 0;  // per thread (softcap): MUFU like ex2
  double barriers = 0;
  double global_bytes = 0;
  double flops = 0;              // useful FLOPs of the tile (the forward's 4 * rows * keys * d; backward 2.5x)
  double warp_instructions = 0;  // the issue estimate (docs/perf/layouts.md)
  std::vector<emu::SiteTraffic> worst_sites;  // of the tile's shared traffic, worst first
  std::string problem;                        // what was emulated
};

// Clock cycles each resource needs for one tile on one SM, and the bound.
struct Bound {
  std::map<std::string, double> cycles;  // tensor, shared, mufu, issue
  std::string limiter;
  double cycles_per_tile = 0;
  double tflops = 0;  // for the whole GPU: flops / cycles x clock x SMs
};

struct ProfileOptions {
  DType dtype = DType::kBF16;
  std::optional<int> sm_count;      // default: the architecture's example part
  std::optional<double> clock_ghz;  // default: the clock its peak is quoted at
  bool compile = true;              // static resources and SASS (needs NVRTC; SASS needs nvdisasm)
  bool emulate = true;              // the emulated cost per key tile and the bound (needs the emulator's instance)
};

struct VariantProfile {
  std::string variant;
  std::string arch;
  DType dtype = DType::kBF16;
  ArchRates rates;
  int sm_count = 0;
  double clock_ghz = 0;
  StaticResources resources;
  SassMix sass;
  SassAudit sass_audit;   // registers and spills per setmaxnreg region, MMA loops
  std::string sass_note;  // why there is no SASS, if there is none
  bool emulated = false;  // per_key_tile and bound hold a measurement
  PerKeyTile per_key_tile;
  Bound bound;
};

// Emulates the variant's kernel on a representative problem twice and takes
// the difference per tile.
PerKeyTile emulate_per_key_tile(const Variant& variant, DType dtype);

// The per-tile costs of `difference` (what `tiles` more tiles of rows x
// keys x head_dim cost), for runs made elsewhere (a planted kernel's).
struct TileShape {
  double rows;
  double keys;
  double head_dim;
  bool backward;
};
PerKeyTile tile_costs(const emu::LaunchCounters& difference, double tiles, const TileShape& shape);

// The bound of `tile` at `rates` (sm_count and clock of the GPU).
Bound bound_of(const PerKeyTile& tile, const ArchRates& rates, int sm_count, double clock_ghz);

// CTAs of the variant that fit on one SM of the architecture.
int ctas_per_sm(const ArchRates& rates, int registers, int threads, int shared_bytes, std::string* limited_by);

// Everything above for one variant on one architecture.
VariantProfile profile_variant(const Variant& variant, const std::string& arch, const ProfileOptions& options);

}  // namespace attune::profile
