#include "runtime/launch/flash_fwd_sm90_params.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"

#include "generated/kernel_shapes.h"
#include "runtime/launch/flash_fwd_params.h"

namespace attune {

namespace {

// kVarlen's workspace: the problem's B, and at most as many tiles as its
// sizes allow (each sequence's m-blocks over the heads: B per-sequence
// blocks of the longest, or, packed, Tq's blocks plus one partial per
// sequence).
sm90_sched::VarlenLayout varlen_layout(const AttentionProblem& p, const Variant& variant) {
  const std::int64_t block_m = FlashFwdSm90Shape::of(variant).block_m;
  const std::int64_t batch = std::max<std::int64_t>(p.batch, 1);
  const std::int64_t per_sequence = (p.max_seqlen_q() + block_m - 1) / block_m;
  std::int64_t blocks = batch * per_sequence;
  if (p.is_packed()) blocks = std::min(blocks, (p.seqlen_q + block_m - 1) / block_m + batch);
  return {batch, std::max<std::int64_t>(blocks * p.heads_q, 1)};
}

}  // namespace

// A packed tensor or a batch of one gets a batch stride TMA accepts, never
// stepped.
TensorMapSpec sm90_tensor_map(const void* base, const TensorStrides& s, bool packed, std::int64_t batch,
                              std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::uint32_t box_rows,
                              int bytes) {
  packed = packed || batch <= 1;
  TensorMapSpec m;
  m.address = base;
  m.rank = 4;
  m.element_bytes = bytes;
  m.dims = {static_cast<std::uint64_t>(head_dim), static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 1)),
            static_cast<std::uint64_t>(heads),
            static_cast<std::uint64_t>(packed ? 1 : std::max<std::int64_t>(batch, 1))};
  const std::int64_t batch_stride = packed ? s.head * heads : s.batch;
  m.strides = {static_cast<std::uint64_t>(bytes * s.seq), static_cast<std::uint64_t>(bytes * s.head),
               static_cast<std::uint64_t>(bytes * batch_stride), 0};
  m.box = {static_cast<std::uint32_t>(128 / bytes), box_rows, 1, 1, 1};
  m.swizzle = sm90::Swizzle::k128B;
  return m;
}

bool flash_fwd_sm90_pairs(const AttentionProblem& p, const Variant& variant) {
  const FlashFwdSm90Shape shape = FlashFwdSm90Shape::of(variant);
  if (shape.scheduler != sm90_sched::kCluster) return false;
  const std::int64_t m_blocks = (p.seqlen_q + shape.block_m - 1) / shape.block_m;
  return p.mask.kind == MaskKind::kNone && !p.is_packed() && !p.has_packed_keys() && !p.has_seqlens_k() &&
         !p.has_fp8() && p.seqlen_k > 0 && m_blocks % sm90_sched::kClusterBlocks == 0;
}

std::string sm90_unfit_reason(const AttentionProblem& p, const AttentionBuffers& b) {
  std::string why = sm90_unfit_reason(p);
  if (!why.empty()) return why;
  for (const auto& [name, pointer] : {std::pair{"Q", b.q}, std::pair{"K", b.k}, std::pair{"V", b.v}}) {
    if (p.seqlen_k == 0 && name[0] != 'Q') continue;
    if (reinterpret_cast<std::uintptr_t>(pointer) % 16 != 0) return std::string(name) + " not 16-byte aligned";
  }
  return {};
}

Sm90TensorMaps flash_fwd_sm90_maps(const AttentionProblem& p, const AttentionBuffers& b, const Variant& variant) {
  const FlashFwdSm90Shape shape = FlashFwdSm90Shape::of(variant);
  const bool packed_q = p.is_packed();
  const bool packed_k = p.has_packed_keys();
  const auto bm = static_cast<std::uint32_t>(shape.block_m);
  // Paired blocks each load half of every key tile (into both).
  const auto bn = static_cast<std::uint32_t>(shape.block_n / (flash_fwd_sm90_pairs(p, variant) ? 2 : 1));
  const int bytes = element_bytes(p.dtype);  // e4m3 Q, K and V, or all 16-bit (sm90_fit)
  return {sm90_tensor_map(b.q, p.q_strides, packed_q, p.batch, p.seqlen_q, p.heads_q, p.head_dim_k, bm, bytes),
          sm90_tensor_map(b.k, p.k_strides, packed_k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_k, bn, bytes),
          sm90_tensor_map(b.v, p.v_strides, packed_k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, bn, bytes),
          sm90_tensor_map(b.o, p.o_strides, packed_q, p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, 64)};
}

FlashFwdSm90Params flash_fwd_sm90_params_without_maps(const AttentionProblem& p, const AttentionBuffers& b,
                                                      const DeviceMetadata& metadata, const Variant& variant,
                                                      void* scheduler_workspace) {
  FlashFwdSm90Params k{};
  const FlashFwdParams fwd = flash_fwd_params(p, b, metadata);
  k.fwd = fwd;  // the shared part
  k.dropout = fwd.dropout;
  k.fp8 = fwd.fp8;
  fill_tunable_fields(k, FlashFwdSm90Shape::of(variant));
  k.tiles = flash_fwd_sm90_tiles(p, variant);
  const int scheduler = FlashFwdSm90Shape::of(variant).scheduler;
  if (scheduler == sm90_sched::kDynamic || scheduler == sm90_sched::kVarlen) {
    if (scheduler_workspace == nullptr) {
      throw InvalidArgument("variant " + variant.id() + ": the " +
                            (scheduler == sm90_sched::kVarlen ? "varlen" : "dynamic") +
                            " tile scheduler needs its counter in the workspace; got none");
    }
    auto* base = static_cast<unsigned char*>(scheduler_workspace);
    k.tile_counter = reinterpret_cast<i32*>(base);
    if (scheduler == sm90_sched::kVarlen) {
      const sm90_sched::VarlenLayout layout = varlen_layout(p, variant);
      k.varlen = {reinterpret_cast<i32*>(base + layout.slot_batch_offset()),
                  reinterpret_cast<i32*>(base + layout.tile_start_offset()),
                  reinterpret_cast<u64*>(base + layout.tiles_offset()), static_cast<i32>(layout.capacity)};
    }
  }
  k.cluster_pairs = flash_fwd_sm90_pairs(p, variant) ? 1 : 0;
  k.o_map_valid =
      tma_stride_fit('O', p.o_strides, p.is_packed()).fits() && reinterpret_cast<std::uintptr_t>(b.o) % 16 == 0 ? 1 : 0;
  return k;
}

sm90_sched::TileOrder flash_fwd_sm90_tiles(const AttentionProblem& p, const Variant& variant) {
  const std::int64_t block_m = FlashFwdSm90Shape::of(variant).block_m;
  std::int64_t m_blocks = std::max<std::int64_t>((p.max_seqlen_q() + block_m - 1) / block_m, 1);
  if (flash_fwd_sm90_pairs(p, variant)) m_blocks /= sm90_sched::kClusterBlocks;  // a tile is a pair of m-blocks
  // K and V of one kv head stay in L2 for the query heads of its group.
  const std::int64_t kv_head_bytes =
      std::max<std::int64_t>(p.max_seqlen_k(), 1) * (p.head_dim_k + p.head_dim_v) * element_bytes(p.k_dtype());
  const std::int64_t kv_heads = std::max<std::int64_t>(kL2SectionBytes / kv_head_bytes, 1);
  return sm90_tile_order("flash_fwd_sm90", "query blocks", m_blocks, p.heads_q, std::max<std::int64_t>(p.batch, 1),
                         kv_heads * p.group_size());
}

sm90_sched::TileOrder sm90_tile_order(std::string_view kernel, std::string_view blocks_are, std::int64_t blocks,
                                      std::int64_t heads, std::int64_t batches, std::int64_t section) {
  const std::int64_t pairs = heads * batches;
  if (blocks * pairs > std::numeric_limits<std::int32_t>::max()) {
    throw InvalidArgument(std::string(kernel) + ": " + std::to_string(blocks * pairs) + " tiles (" +
                          std::string(blocks_are) + " x heads x batch); expected at most 2^31 - 1");
  }
  return {static_cast<i32>(blocks), static_cast<i32>(heads), static_cast<i32>(batches),
          static_cast<i32>(std::clamp<std::int64_t>(section, 1, pairs))};
}

LaunchConfig flash_fwd_sm90_launch(const FlashFwdSm90Params& params, const Variant& variant, int sm_count) {
  const i32 tiles = params.tiles.count();
  const i32 sms = std::max(sm_count, 1);
  LaunchConfig c{
      .grid = {tiles, 1, 1}, .block = {variant.threads(), 1, 1}, .dynamic_shared_bytes = variant.shared_bytes()};
  const int scheduler = FlashFwdSm90Shape::of(variant).scheduler;
  if (scheduler == sm90_sched::kGrid) return c;
  if (scheduler != sm90_sched::kCluster) {
    c.grid.x = std::min(tiles, sms);
    return c;
  }
  constexpr i32 kBlocks = sm90_sched::kClusterBlocks;
  c.cluster = {kBlocks, 1, 1};
  // Paired: one cluster per pair, at most one per two SMs. Unpaired: whole
  // clusters of blocks that run alone (the odd one out may have no tile).
  c.grid.x = params.cluster_pairs != 0 ? kBlocks * std::min(tiles, std::max(sms / kBlocks, 1))
                                       : (std::min(tiles, sms) + kBlocks - 1) / kBlocks * kBlocks;
  return c;
}

std::size_t flash_fwd_sm90_workspace_bytes(const Variant& variant, const AttentionProblem& problem) {
  if (variant.kernel == nullptr || variant.kernel->id != KernelId::kFlashFwdSm90) return 0;
  switch (FlashFwdSm90Shape::of(variant).scheduler) {
    case sm90_sched::kDynamic:
      return sm90_sched::VarlenLayout::counter_bytes();
    case sm90_sched::kVarlen:
      return static_cast<std::size_t>(varlen_layout(problem, variant).bytes());
    default:
      return 0;
  }
}

const Variant& sm90_varlen_tiles_variant() {
  static const Variant kVariant = only_variant(KernelId::kSm90VarlenTiles);
  return kVariant;
}

Sm90VarlenTilesParams sm90_varlen_tiles_params(const FlashFwdSm90Params& forward, const Variant& variant) {
  const FlashFwdBase& f = forward.fwd;
  return {.seqs = {f.cu_seqlens_q, f.cu_seqlens_k, f.seqlens_k, f.seqlen_q, f.seqlen_k},
          .mask = f.mask,
          .batches = forward.tiles.batches,
          .heads = forward.tiles.heads,
          .section_heads = std::min(forward.tiles.section_heads, forward.tiles.heads),
          .block_m = FlashFwdSm90Shape::of(variant).block_m,
          .out = forward.varlen};
}

LaunchConfig sm90_varlen_tiles_launch() {
  const Variant& v = sm90_varlen_tiles_variant();
  return {.grid = {1, 1, 1}, .block = {v.threads(), 1, 1}, .dynamic_shared_bytes = v.shared_bytes()};
}

}  // namespace attune
