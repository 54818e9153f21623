#include "profile/profile.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "generated/kernel_shapes.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/launch/emu_backend.h"

namespace attune::profile {

namespace {

// Random storage-dtype values: what the kernels compute does not change
// what they do, but finite inputs keep every path the common one.
std::vector<std::uint16_t> random_bits(std::size_t count, DType dtype, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> out(count);
  for (auto& x : out) x = float_to_bits(dtype, normal(rng));
  return out;
}

std::size_t elements(std::int64_t n) { return static_cast<std::size_t>(n); }

// One emulated call of the representative problem with `tiles` key tiles
// (query tiles for the backward).
struct Run {
  emu::LaunchCounters counters;
  std::string problem;
};

// The modifiers a variant compiles in, for its representative problem:
// values that change no work (softcap 30, sinks 0, slopes 1/16).
struct Modifiers {
  ScoreModifiers on;
  std::vector<float> sinks, slopes;
  Modifiers(const Variant& v, std::int64_t heads) {
    if ((v.modifiers & kModSoftcap) != 0) on.softcap = 30.0;
    on.sinks = (v.modifiers & kModSinks) != 0;
    if ((v.modifiers & kModAlibi) != 0) on.alibi = AlibiSlopes::kPerHead;
    sinks.assign(on.sinks ? static_cast<std::size_t>(heads) : 0, 0.0F);
    slopes.assign(on.alibi != AlibiSlopes::kNone ? static_cast<std::size_t>(heads) : 0, 1.0F / 16);
  }
  const float* sinks_or_null() const { return sinks.empty() ? nullptr : sinks.data(); }
  const float* slopes_or_null() const { return slopes.empty() ? nullptr : slopes.data(); }
};

// The representative problem of one call, [1, sq, hq, d] queries over
// [1, sk, 1, d] keys and values, with random Q, K and V (seeds 1, 2, 3).
struct Inputs {
  AttentionProblem p;
  std::vector<std::uint16_t> q, k, v;
  Inputs(std::int64_t sq, std::int64_t hq, std::int64_t sk, std::int64_t head_dim, DType dtype, const Modifiers& m)
      : p(make_problem(std::vector<std::int64_t>{1, sq, hq, head_dim}, std::vector<std::int64_t>{1, sk, 1, head_dim},
                       std::vector<std::int64_t>{1, sk, 1, head_dim}, {.dtype = dtype, .modifiers = m.on})),
        q(random_bits(elements(q_extent(p)), dtype, 1)),
        k(random_bits(elements(k_extent(p)), dtype, 2)),
        v(random_bits(elements(v_extent(p)), dtype, 3)) {}
};

// Rows, keys per tile and head dim of a forward variant of either family.
struct Tiles {
  std::int64_t block_m, block_n, head_dim;
};
Tiles forward_tiles(const Variant& v) {
  if (v.kernel->id == KernelId::kFlashFwdSm90) {
    const FlashFwdSm90Shape s = FlashFwdSm90Shape::of(v);
    return {s.block_m, s.block_n, s.head_dim};
  }
  const FlashFwdShape s = FlashFwdShape::of(v);
  return {s.block_m, s.block_n, s.head_dim};
}
// The same of a flash_bwd or flash_bwd_sm90 variant.
Tiles backward_tiles(const Variant& v) {
  if (v.kernel->id == KernelId::kFlashBwdSm90) {
    const FlashBwdSm90Shape s = FlashBwdSm90Shape::of(v);
    return {s.block_m, s.block_n, s.head_dim};
  }
  const FlashBwdShape s = FlashBwdShape::of(v);
  return {s.block_m, s.block_n, s.head_dim};
}

Run run_forward(const Variant& v, DType dtype, int tiles) {
  const Tiles s = forward_tiles(v);
  const std::int64_t sq = s.block_m;
  const std::int64_t sk = static_cast<std::int64_t>(tiles) * s.block_n;
  const Modifiers m(v, 1);
  const Inputs in(sq, 1, sk, s.head_dim, dtype, m);
  std::vector<std::uint16_t> o(elements(o_extent(in.p)));
  std::vector<float> lse(elements(lse_extent(in.p)));
  Run r;
  emulate_forward(in.p,
                  {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), m.sinks_or_null(), m.slopes_or_null()},
                  v, &r.counters);
  r.problem = "B 1, H 1, Sq " + std::to_string(sq) + " (one CTA), Sk = tiles x " + std::to_string(s.block_n) + ", d " +
              std::to_string(s.head_dim) + ", no mask";
  return r;
}

Run run_decode(const Variant& v, DType dtype, int tiles) {
  const FlashDecodeShape s = FlashDecodeShape::of(v);
  // One CTA of kBlockM rows: query positions, or the query heads of one KV head.
  const std::int64_t sq = s.pack_gqa != 0 ? 1 : s.block_m;
  const std::int64_t hq = s.pack_gqa != 0 ? s.block_m : 1;
  const std::int64_t sk = static_cast<std::int64_t>(tiles) * s.block_n;
  const Modifiers m(v, hq);
  const Inputs in(sq, hq, sk, s.head_dim, dtype, m);
  std::vector<std::uint16_t> o(elements(o_extent(in.p)));
  std::vector<float> lse(elements(lse_extent(in.p)));
  Run r;
  emulate_decode(in.p,
                 {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), m.sinks_or_null(), m.slopes_or_null()},
                 v, 1, &r.counters);
  r.problem = "one CTA of " + std::to_string(s.block_m) + " rows, cache = tiles x " + std::to_string(s.block_n) +
              ", 1 split, d " + std::to_string(s.head_dim);
  return r;
}

Run run_backward(const Variant& v, DType dtype, int tiles) {
  const Tiles s = backward_tiles(v);
  const std::int64_t sq = static_cast<std::int64_t>(tiles) * s.block_m;
  const std::int64_t sk = s.block_n;  // one CTA
  const Modifiers m(v, 1);
  const Inputs in(sq, 1, sk, s.head_dim, dtype, m);
  const auto o = random_bits(elements(o_extent(in.p)), dtype, 4);
  const auto d_o = random_bits(elements(o_extent(in.p)), dtype, 5);
  const std::vector<float> lse(elements(lse_extent(in.p)), 4.0F);
  std::vector<std::uint16_t> dq(in.q.size());
  std::vector<std::uint16_t> dk(in.k.size());
  std::vector<std::uint16_t> dv(in.v.size());
  Run r;
  emulate_backward(in.p,
                   {in.q.data(), in.k.data(), in.v.data(), o.data(), d_o.data(), lse.data(), dq.data(), dk.data(),
                    dv.data(), nullptr, m.slopes_or_null(), nullptr},
                   v, &r.counters);
  r.problem = "one CTA of " + std::to_string(s.block_n) + " keys, Sq = tiles x " + std::to_string(s.block_m) + ", d " +
              std::to_string(s.head_dim) + ", no mask";
  return r;
}

// Each count of a launch and the field that holds it per key tile.
constexpr std::pair<std::uint64_t emu::LaunchCounters::*, double PerKeyTile::*> kPerTileCounts[] = {
    {&emu::LaunchCounters::mma, &PerKeyTile::mma},
    {&emu::LaunchCounters::wgmma, &PerKeyTile::wgmma},
    {&emu::LaunchCounters::wgmma_flops, &PerKeyTile::wgmma_flops},
    {&emu::LaunchCounters::ldmatrix, &PerKeyTile::ldmatrix},
    {&emu::LaunchCounters::shared_instructions, &PerKeyTile::shared_instructions},
    {&emu::LaunchCounters::shuffles, &PerKeyTile::shuffles},
    {&emu::LaunchCounters::shared_wavefronts, &PerKeyTile::smem_wavefronts},
    {&emu::LaunchCounters::shared_ideal, &PerKeyTile::smem_wavefronts_ideal},
    {&emu::LaunchCounters::ex2, &PerKeyTile::ex2},
    {&emu::LaunchCounters::tanh, &PerKeyTile::tanh},
    {&emu::LaunchCounters::barriers, &PerKeyTile::barriers},
    {&emu::LaunchCounters::global_bytes, &PerKeyTile::global_bytes}};

TileShape tile_shape(const Variant& v) {
  switch (v.kernel->id) {
    case KernelId::kFlashFwd:
    case KernelId::kFlashFwdSm90: {
      const Tiles s = forward_tiles(v);
      return {static_cast<double>(s.block_m), static_cast<double>(s.block_n), static_cast<double>(s.head_dim), false};
    }
    case KernelId::kFlashDecode: {
      const FlashDecodeShape s = FlashDecodeShape::of(v);
      return {static_cast<double>(s.block_m), static_cast<double>(s.block_n), static_cast<double>(s.head_dim), false};
    }
    case KernelId::kFlashBwd:
    case KernelId::kFlashBwdSm90: {
      const Tiles s = backward_tiles(v);
      return {static_cast<double>(s.block_m), static_cast<double>(s.block_n), static_cast<double>(s.head_dim), true};
    }
    default:
      throw InvalidArgument("profile: variant " + v.id() +
                            "; expected a flash_fwd, flash_decode or flash_bwd variant (the tiled kernels)");
  }
}

}  // namespace

PerKeyTile tile_costs(const emu::LaunchCounters& d, double n, const TileShape& shape) {
  PerKeyTile t;
  for (const auto& [count, per_tile] : kPerTileCounts) t.*per_tile = static_cast<double>(d.*count) / n;
  t.flops = (shape.backward ? 2.5 : 1.0) * 4.0 * shape.rows * shape.keys * shape.head_dim;
  // Issue: the counted warp instructions plus an estimate of the fp32 work
  // around them (per score element: scale, mask, max, subtract, sum; the
  // backward also forms dP - D and dS; per output element: one rescale),
  // and the conversions packing P into 16 bits.
  const double scores = shape.rows * shape.keys;
  const double fp32 = shape.backward ? scores * 8.0 : scores * 4.0 + shape.rows * shape.head_dim + scores / 2.0;
  t.warp_instructions =
      4.0 * t.wgmma + t.mma + t.ldmatrix + t.shared_instructions + t.shuffles + (t.ex2 + t.tanh) / 32.0 + fp32 / 32.0;
  for (emu::SiteTraffic s : d.worst(5)) {
    s.instructions = static_cast<std::uint64_t>(static_cast<double>(s.instructions) / n);
    s.wavefronts = static_cast<std::uint64_t>(static_cast<double>(s.wavefronts) / n);
    s.ideal = static_cast<std::uint64_t>(static_cast<double>(s.ideal) / n);
    t.worst_sites.push_back(s);
  }
  return t;
}

PerKeyTile emulate_per_key_tile(const Variant& variant, DType dtype) {
  const TileShape shape = tile_shape(variant);
  const auto run = [&](int tiles) {
    switch (variant.kernel->id) {
      case KernelId::kFlashFwd:
      case KernelId::kFlashFwdSm90:
        return run_forward(variant, dtype, tiles);
      case KernelId::kFlashDecode:
        return run_decode(variant, dtype, tiles);
      default:
        return run_backward(variant, dtype, tiles);
    }
  };
  // 2 and 4 tiles: the difference is two tiles of the steady state (every
  // pipeline stage filled), the prologue and epilogue cancel.
  constexpr int kFew = 2;
  constexpr int kMany = 4;
  const Run few = run(kFew);
  const Run many = run(kMany);
  PerKeyTile t = tile_costs(many.counters.minus(few.counters), kMany - kFew, shape);
  t.problem = few.problem + "; tiles 2 and 4, the difference over 2";
  return t;
}

Bound bound_of(const PerKeyTile& t, const ArchRates& r, int sm_count, double clock_ghz) {
  Bound b;
  b.cycles["tensor"] = t.mma * 2.0 * 16 * 8 * 16 / r.mma_flops_per_clock;
  if (t.wgmma_flops > 0) {
    if (r.wgmma_flops_per_clock <= 0) throw InvalidArgument("profile: wgmma counted on " + r.arch + ", which has none");
    b.cycles["tensor"] += t.wgmma_flops / r.wgmma_flops_per_clock;
  }
  b.cycles["shared"] = t.smem_wavefronts / r.shared_wavefronts_per_clock;
  b.cycles["mufu"] = (t.ex2 + t.tanh) / r.mufu_per_clock;
  b.cycles["issue"] = t.warp_instructions / r.issue_per_clock;
  for (const auto& [name, cycles] : b.cycles) {
    if (cycles > b.cycles_per_tile) {
      b.cycles_per_tile = cycles;
      b.limiter = name;
    }
  }
  if (b.cycles_per_tile > 0) {
    b.tflops = t.flops / b.cycles_per_tile * clock_ghz * 1e9 * sm_count / 1e12;
  }
  return b;
}

int ctas_per_sm(const ArchRates& r, int registers, int threads, int shared_bytes, std::string* limited_by) {
  const int warps = (threads + 31) / 32;
  // Registers are allocated per warp in units of 256 (8 per thread).
  const int per_warp = ((std::max(registers, 1) * 32 + 255) / 256) * 256;
  const int by_registers = r.registers_per_sm / std::max(per_warp * warps, 1);
  // Each CTA also reserves 1 KiB of shared memory for the system (sm_80 on).
  const int by_shared = shared_bytes > 0 ? r.shared_bytes_per_sm / (shared_bytes + 1024) : r.max_ctas_per_sm;
  const int by_threads = r.max_threads_per_sm / std::max(threads, 1);
  const std::pair<int, const char*> limits[] = {
      {by_registers, "registers"}, {by_shared, "shared memory"}, {by_threads, "threads"}, {r.max_ctas_per_sm, "CTAs"}};
  const auto* least = std::min_element(std::begin(limits), std::end(limits),
                                       [](const auto& a, const auto& b) { return a.first < b.first; });
  if (limited_by != nullptr) *limited_by = least->second;
  return least->first;
}

VariantProfile profile_variant(const Variant& variant, const std::string& arch, const ProfileOptions& options) {
  VariantProfile p;
  p.variant = variant.id();
  p.arch = arch;
  p.dtype = options.dtype;
  p.rates = arch_rates(arch);
  p.sm_count = options.sm_count.value_or(p.rates.sm_count);
  p.clock_ghz = options.clock_ghz.value_or(p.rates.clock_ghz);
  p.resources.shared_bytes = variant.shared_bytes();
  p.resources.threads = variant.threads();
  if (options.compile) {
    const CompileResult c = compile_with_nvrtc(variant.kernel->source, std::string(variant.kernel->name) + ".cu",
                                               variant.name_expression(options.dtype), arch);
    if (!c.ok) throw Error("profile: compiling " + variant.id() + " for " + arch + " failed:\n" + c.log);
    p.resources.registers = c.registers;
    p.resources.spill_bytes = c.spill_bytes;
    std::istringstream log(c.log);
    for (std::string line; std::getline(log, line);) {
      if (line.find("warning") != std::string::npos) p.resources.ptxas_warnings.push_back(line);
    }
    p.resources.ctas_per_sm =
        ctas_per_sm(p.rates, c.registers, p.resources.threads, p.resources.shared_bytes, &p.resources.ctas_limited_by);
    try {
      const std::string text = disassemble(c.cubin);
      p.sass = count_sass(text);
      p.sass_audit = audit_sass(text);
    } catch (const Error& e) {
      p.sass_note = e.what();
    }
  }
  if (!options.emulate) return p;
  p.per_key_tile = emulate_per_key_tile(variant, options.dtype);
  p.bound = bound_of(p.per_key_tile, p.rates, p.sm_count, p.clock_ghz);
  p.emulated = true;
  return p;
}

}  // namespace attune::profile
