#include "runtime/dispatch/heuristics.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "generated/kernel_shapes.h"
#include "runtime/launch/flash_decode_params.h"
#include "templates/sm90_scheduler.cuh"

namespace attune {

namespace {

std::vector<Variant> candidates_for(std::string_view op, DType dtype, int dk, int dv, const ArchLimits& arch,
                                    std::uint8_t modifiers) {
  std::vector<Variant> candidates = enumerate_variants(op, dtype, dk, dv, arch, modifiers);
  if (candidates.empty()) {
    throw InvalidArgument("no " + std::string(op) + " variant fits Dk " + std::to_string(dk) + ", Dv " +
                          std::to_string(dv) + " on " + arch.name);
  }
  return candidates;
}

}  // namespace

Variant heuristic_variant(std::string_view op, DType dtype, int dk, int dv, const ArchLimits& arch,
                          std::uint8_t modifiers, ForwardHints hints) {
  if (op == "bwd") return heuristic_backward_variant(dtype, dk, dv, arch, false, modifiers, hints.portable_only);
  std::vector<Variant> candidates = candidates_for(op, dtype, dk, dv, arch, modifiers);
  std::vector<Variant> hopper;
  std::erase_if(candidates, [&](Variant& v) {
    if (v.kernel->id != KernelId::kFlashFwdSm90) return false;
    hopper.push_back(std::move(v));
    return true;
  });
  if (!hopper.empty() && !hints.portable_only) {
    // FlashAttention-3's tiles per head dim: 192 x 128 on three consumer
    // warpgroups at d64; 128 x 176 (128 x 128 when masked) at d128; 128 x 80
    // at d256; the S GEMM of the next tile issued before the softmax, two
    // consumers taking turns where there are two, O out through TMA;
    // persistent CTAs, taking tiles of unequal work (a mask) from the
    // dynamic scheduler, heaviest first, else in a static stride; packed
    // sequences from the varlen scheduler (the longest sequence first).
    const int bucket = FlashFwdSm90Shape::of(hopper.front()).head_dim;
    const bool d64 = bucket <= 64;
    const bool d128 = bucket <= 128 && !d64;
    FlashFwdSm90Shape wanted{.head_dim = bucket,
                             .block_m = d64 ? 192 : 128,
                             .block_n = d64    ? 128
                                        : d128 ? (hints.masked ? 128 : 176)
                                               : 80,
                             .stages = 2,
                             .pingpong = d64 ? 0 : 1,
                             .overlap = 1,
                             .rescale_after = 0,
                             .tma_store = 1,
                             .scheduler = hints.varlen   ? sm90_sched::kVarlen
                                          : hints.masked ? sm90_sched::kDynamic
                                                         : sm90_sched::kStatic};
    // Where the register model leaves that tile out, the next smaller key
    // tile with the same schedule; then the nearest listed variant.
    const FlashFwdSm90Shape first = wanted;
    for (; wanted.block_n >= 64; wanted.block_n -= 16) {
      const auto exact =
          std::find_if(hopper.begin(), hopper.end(), [&](const Variant& v) { return v.values == wanted.values(); });
      if (exact != hopper.end()) return *exact;
    }
    return nearest_variant(hopper, first.values());
  }
  return flash_attention2_forward(candidates);
}

Variant heuristic_backward_variant(DType dtype, int dk, int dv, const ArchLimits& arch, bool deterministic,
                                   std::uint8_t modifiers, bool portable_only) {
  std::vector<Variant> candidates = candidates_for("bwd", dtype, dk, dv, arch, modifiers);
  std::vector<Variant> hopper;
  std::erase_if(candidates, [&](Variant& v) {
    if (v.kernel->id != KernelId::kFlashBwdSm90) return false;
    hopper.push_back(std::move(v));
    return true;
  });
  if (!hopper.empty() && !portable_only) {
    // FlashAttention-3's backward: 128 keys per CTA on two consumer
    // warpgroups, 64-row query steps (128 at d64, where the accumulators
    // fit: 12% fewer instructions per query row, NVRTC; not with softcap
    // or ALiBi, whose elementwise work at 128 rows spills), two stages in
    // flight; dQ staged in shared memory and added by TMA bulk reductions,
    // in turns when deterministic.
    const int head_dim = FlashBwdSm90Shape::of(hopper.front()).head_dim;
    const bool element_mods = (modifiers & (kModSoftcap | kModAlibi)) != 0;
    const FlashBwdSm90Shape wanted{.head_dim = head_dim,
                                   .block_m = head_dim <= 64 && !element_mods ? 128 : 64,
                                   .block_n = 128,
                                   .stages = 2,
                                   .dq_atomic = deterministic ? 0 : 1,
                                   .dq_tma = 1,
                                   .pds_registers = 1,
                                   .sdp_swapped = 1};
    return nearest_variant(hopper, wanted.values());
  }
  // (Deterministic or not changes neither validity nor resources.)
  return flash_attention2_backward(candidates, deterministic);
}

int backward_dq_atomic(const Variant& v) {
  return v.kernel->id == KernelId::kFlashBwdSm90 ? FlashBwdSm90Shape::of(v).dq_atomic : FlashBwdShape::of(v).dq_atomic;
}

std::optional<Variant> backward_dq_twin(const Variant& v, int dq_atomic) {
  const auto with_dq_atomic = [&](auto shape) {
    shape.dq_atomic = dq_atomic;
    return shape.values();
  };
  std::vector<int> values = v.kernel->id == KernelId::kFlashBwdSm90 ? with_dq_atomic(FlashBwdSm90Shape::of(v))
                                                                    : with_dq_atomic(FlashBwdShape::of(v));
  if (!v.kernel->valid(values)) return std::nullopt;
  return Variant{v.kernel, std::move(values), v.modifiers};
}

Variant heuristic_decode_variant(const AttentionProblem& p, const ArchLimits& arch) {
  const auto dk = static_cast<int>(p.head_dim_k);
  const auto dv = static_cast<int>(p.head_dim_v);
  const std::vector<Variant> candidates =
      candidates_for("decode", p.compute_dtype(), dk, dv, arch, modifier_bits(p.modifiers));
  const int pack = p.group_size() > 1 ? 1 : 0;
  const std::int64_t rows = p.seqlen_q * (pack != 0 ? p.group_size() : 1);
  const int bucket = FlashDecodeShape::of(candidates.front()).head_dim;
  // Few rows: one 16-row warp row, four warps sharing each 64-key tile.
  const bool few = rows <= 16;
  const FlashDecodeShape wanted{.head_dim = bucket,
                                .block_m = few ? 16 : 64,
                                .block_n = 64,
                                .warps_n = few ? 4 : 1,
                                .stages = 2,
                                .pack_gqa = pack};
  return nearest_variant(candidates, wanted.values());
}

Op paged_forward_op(const AttentionProblem& p) {
  // Dropout (training) only the forward kernels have.
  return !p.is_paged() || p.max_seqlen_q() >= kPagedForwardRows || p.modifiers.dropout() ? Op::kForward : Op::kDecode;
}

int heuristic_splits(const AttentionProblem& p, const Variant& v, int sm_count) {
  const LaunchConfig one = flash_decode_launch(p, v, 1);
  const std::int64_t ctas = static_cast<std::int64_t>(one.grid.y) * one.grid.z;
  const std::int64_t block_n = FlashDecodeShape::of(v).block_n;
  const std::int64_t tiles = std::max<std::int64_t>((longest_cache(p) + block_n - 1) / block_n, 1);
  const std::int64_t most = std::min<std::int64_t>({tiles, kMaxDecodeSplits, 2 * std::max(sm_count, 1)});
  // Wave efficiency: the share of the last wave's SMs that have work; take
  // the fewest splits within 85% of the best, since each split adds a
  // workspace round trip and combine work.
  const auto efficiency = [&](std::int64_t s) {
    const double waves = static_cast<double>(ctas * s) / std::max(sm_count, 1);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (std::int64_t s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (std::int64_t s = 1; s <= most; ++s) {
    if (efficiency(s) >= 0.85 * best) return static_cast<int>(s);
  }
  return 1;
}

}  // namespace attune
