#include "runtime/launch/flash_bwd_params.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/launch/flash_bwd_sm90_params.h"
#include "runtime/launch/kernel_params.h"
#include "templates/flash_bwd_sm90.cuh"

namespace attune {

namespace {

// Rows of the workspaces: each sequence's start on a dQ tile
// (bwd_detail::sequence), and a whole number of tiles, so that every
// workspace after D starts 256-byte aligned (TMA maps need 16).
std::int64_t workspace_rows(const AttentionProblem& p) {
  const std::int64_t tile = kDqTileRows;
  const auto whole_tiles = [&](std::int64_t rows) { return (rows + tile - 1) / tile * tile; };
  return p.is_packed() ? whole_tiles(p.seqlen_q + tile * p.batch) : p.batch * whole_tiles(p.seqlen_q);
}

std::int64_t longest_key_capacity(const AttentionProblem& p) { return p.max_seqlen_k(); }

// How a main kernel of either family accumulates dQ (BackwardWorkspace).
enum class DqPath { kAtomic, kSlices, kTurns };

// What the workspace and the grid need of a main kernel: keys per CTA, and
// the dQ path.
struct MainTiles {
  int block_n;
  DqPath dq;
};

MainTiles main_tiles(const Variant& main) {
  if (main.kernel->id == KernelId::kFlashBwdSm90) {
    const FlashBwdSm90Shape s = FlashBwdSm90Shape::of(main);
    return {s.block_n, s.dq_atomic != 0 ? DqPath::kAtomic : DqPath::kTurns};
  }
  const FlashBwdShape s = FlashBwdShape::of(main);
  return {s.block_n, s.dq_atomic != 0 ? DqPath::kAtomic : DqPath::kSlices};
}

}  // namespace

std::int64_t backward_key_blocks(const AttentionProblem& p, int block_n) {
  return std::max<std::int64_t>((longest_key_capacity(p) + block_n - 1) / block_n, 1);
}

BackwardWorkspace backward_workspace(const AttentionProblem& p, const Variant& main) {
  const std::int64_t rows = workspace_rows(p);
  const std::int64_t dq = rows * p.heads_q * p.head_dim_k;
  BackwardWorkspace w;
  w.d_floats = p.heads_q * rows;
  const MainTiles t = main_tiles(main);
  if (t.dq == DqPath::kSlices) {
    w.dq_partial_floats = backward_key_blocks(p, t.block_n) * dq;
  } else {
    w.dq_accum_floats = dq;
  }
  if (t.dq == DqPath::kTurns) {
    w.dq_turn_tiles = static_cast<std::int32_t>((p.max_seqlen_q() + kDqTileRows - 1) / kDqTileRows);
    w.dq_turn_ints = std::max<std::int64_t>(p.batch, 1) * p.heads_q * w.dq_turn_tiles;
  }
  return w;
}

BackwardWorkspacePointers split_workspace(const BackwardWorkspace& sizes, float* base) {
  BackwardWorkspacePointers w;
  w.d = sizes.d_floats > 0 ? base : nullptr;
  float* next = base + sizes.d_floats;
  if (sizes.dq_accum_floats > 0) w.dq_accum = next;
  next += sizes.dq_accum_floats;
  if (sizes.dq_partial_floats > 0) w.dq_partial = next;
  next += sizes.dq_partial_floats;
  // The counters are int32 words of the same allocation.
  if (sizes.dq_turn_ints > 0) w.dq_turns = reinterpret_cast<i32*>(next);
  w.dq_turn_tiles = sizes.dq_turn_tiles;
  return w;
}

FlashBwdParams flash_bwd_params(const AttentionProblem& p, const BackwardBuffers& b, const DeviceMetadata& metadata,
                                const Variant& main, const BackwardWorkspacePointers& workspace) {
  if (p.is_paged()) throw InvalidArgument("backward: a paged KV cache; expected contiguous K and V");
  FlashBwdParams k{};
  k.q = static_cast<const u16*>(b.q);
  k.k = static_cast<const u16*>(b.k);
  k.v = static_cast<const u16*>(b.v);
  k.o = static_cast<const u16*>(b.o);
  k.d_o = static_cast<const u16*>(b.d_o);
  k.lse = b.lse;
  k.dq = static_cast<u16*>(b.dq);
  k.dk = static_cast<u16*>(b.dk);
  k.dv = static_cast<u16*>(b.dv);
  k.d = workspace.d;
  k.dq_accum = workspace.dq_accum;
  k.dq_partial = workspace.dq_partial;
  k.dq_turns = workspace.dq_turns;
  k.sequences = static_cast<i32>(std::max<std::int64_t>(p.batch, 1));
  k.dq_turn_tiles = workspace.dq_turn_tiles;
  set_strides(k, p);
  // dO like O, the gradients like their tensors.
  put_strides(k.do_batch_stride, k.do_row_stride, k.do_head_stride, p.o_strides);
  put_strides(k.dq_batch_stride, k.dq_row_stride, k.dq_head_stride, p.q_strides);
  put_strides(k.dk_batch_stride, k.dk_row_stride, k.dk_head_stride, p.k_strides);
  put_strides(k.dv_batch_stride, k.dv_row_stride, k.dv_head_stride, p.v_strides);
  k.rows = workspace_rows(p);
  k.cu_seqlens_q = p.is_packed() ? metadata.cu_seqlens_q : nullptr;
  k.cu_seqlens_k = p.has_packed_keys() ? metadata.cu_seqlens_k : nullptr;
  k.seqlens_k = p.has_seqlens_k() ? metadata.seqlens_k : nullptr;
  set_problem_fields(k, p);
  k.mods = score_mod_params(p, b.sinks, b.alibi_slopes);
  k.dsink = p.modifiers.sinks ? b.dsink : nullptr;
  k.dropout = dropout_params_of(p, b.rng_state);
  k.scale = static_cast<float>(p.softmax_scale());
  // partial_keys: flash_bwd's key block (flash_bwd_sm90 has no slices).
  if (main.kernel->id == KernelId::kFlashBwd) fill_tunable_fields(k, FlashBwdShape::of(main));
  const bool packed = p.is_packed();
  k.vectorized = rows_aligned(b.q, p.q_strides, packed) && rows_aligned(b.k, p.k_strides, packed) &&
                         rows_aligned(b.v, p.v_strides, packed) && rows_aligned(b.d_o, p.o_strides, packed)
                     ? 1
                     : 0;
  return k;
}

LaunchConfig flash_bwd_launch(const AttentionProblem& p, const Variant& variant, int sm_count) {
  if (variant.kernel->id == KernelId::kFlashBwdSm90) {
    return flash_bwd_sm90_launch(p, flash_bwd_sm90_tiles(p, variant), variant, sm_count);
  }
  const std::int64_t blocks = backward_key_blocks(p, main_tiles(variant).block_n);
  return {.grid = {static_cast<i32>(blocks), static_cast<i32>(p.heads_kv),
                   static_cast<i32>(std::max<std::int64_t>(p.batch, 1))},
          .block = {variant.threads(), 1, 1},
          .dynamic_shared_bytes = variant.shared_bytes()};
}

const Variant& bwd_preprocess_variant() {
  static const Variant kPreprocess = only_variant(KernelId::kFlashBwdPreprocess);
  return kPreprocess;
}

const Variant& bwd_dq_convert_variant() {
  static const Variant kConvert = only_variant(KernelId::kFlashBwdDqConvert);
  return kConvert;
}

const Variant& bwd_dsink_variant() {
  static const Variant kDsink = only_variant(KernelId::kFlashBwdDsink);
  return kDsink;
}

LaunchConfig flash_bwd_dsink_launch(const AttentionProblem& p) {
  const Variant& dsink = bwd_dsink_variant();
  const std::int64_t warps = FlashBwdDsinkShape::of(dsink).warps;  // one per head
  return {.grid = {static_cast<i32>((p.heads_q + warps - 1) / warps), 1, 1},
          .block = {dsink.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

LaunchConfig flash_bwd_row_launch(const AttentionProblem& p, const Variant& row) {
  const std::int64_t warps = row.kernel->id == KernelId::kFlashBwdPreprocess ? FlashBwdPreprocessShape::of(row).warps
                                                                             : FlashBwdDqConvertShape::of(row).warps;
  const std::int64_t blocks = (p.max_seqlen_q() + warps - 1) / warps;
  return {.grid = {static_cast<i32>(std::max<std::int64_t>(blocks, 1)), static_cast<i32>(p.heads_q),
                   static_cast<i32>(std::max<std::int64_t>(p.batch, 1))},
          .block = {row.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

}  // namespace attune
