#include "runtime/launch/flash_bwd_sm90_params.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"

#include "generated/kernel_shapes.h"
#include "runtime/launch/flash_fwd_sm90_params.h"

namespace attune {

std::string bwd_sm90_unfit_reason(const AttentionProblem& p, const BackwardBuffers& b) {
  std::string why = sm90_backward_fit(p).reason(p);
  if (!why.empty()) return why;
  if (p.modifiers.dropout()) return "dropout";
  if (p.has_fp8()) return "fp8 inputs";
  if (!tma_stride_fit('O', p.o_strides, p.is_packed() || p.batch <= 1).fits()) return "dO's strides";
  for (const auto& [name, pointer] :
       {std::pair{"Q", b.q}, std::pair{"K", b.k}, std::pair{"V", b.v}, std::pair{"dO", b.d_o}}) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % 16 != 0) return std::string(name) + " not 16-byte aligned";
  }
  return {};
}

Sm90BackwardMaps flash_bwd_sm90_maps(const AttentionProblem& p, const BackwardBuffers& b, const Variant& variant) {
  const FlashBwdSm90Shape shape = FlashBwdSm90Shape::of(variant);
  const bool packed_q = p.is_packed();
  const bool packed_k = p.has_packed_keys();
  const auto bm = static_cast<std::uint32_t>(shape.block_m);
  const auto bn = static_cast<std::uint32_t>(shape.block_n);
  return {sm90_tensor_map(b.q, p.q_strides, packed_q, p.batch, p.seqlen_q, p.heads_q, p.head_dim_k, bm),
          sm90_tensor_map(b.k, p.k_strides, packed_k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_k, bn),
          sm90_tensor_map(b.v, p.v_strides, packed_k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, bn),
          sm90_tensor_map(b.d_o, p.o_strides, packed_q, p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, bm)};
}

sm90_sched::TileOrder flash_bwd_sm90_tiles(const AttentionProblem& p, const Variant& variant) {
  const std::int64_t block_n = FlashBwdSm90Shape::of(variant).block_n;
  const std::int64_t key_blocks = std::max<std::int64_t>((p.max_seqlen_k() + block_n - 1) / block_n, 1);
  const std::int64_t batches = std::max<std::int64_t>(p.batch, 1);
  // Every CTA of a (batch, KV head) reads all of its group's Q and dO.
  const std::int64_t pair_bytes = std::max<std::int64_t>(p.max_seqlen_q(), 1) * p.group_size() *
                                  (p.head_dim_k + p.head_dim_v) * element_bytes(p.dtype);
  return sm90_tile_order("flash_bwd_sm90", "key blocks", key_blocks, p.heads_kv, batches, kL2SectionBytes / pair_bytes);
}

i32 flash_bwd_sm90_ctas(const AttentionProblem& p, const sm90_sched::TileOrder& tiles, int sm_count) {
  const bool equal_tiles =
      p.mask.kind == MaskKind::kNone && !p.is_packed() && !p.has_packed_keys() && !p.has_seqlens_k();
  return equal_tiles ? std::min(tiles.count(), std::max(sm_count, 1)) : tiles.count();
}

LaunchConfig flash_bwd_sm90_launch(const AttentionProblem& p, const sm90_sched::TileOrder& tiles,
                                   const Variant& variant, int sm_count) {
  return {.grid = {flash_bwd_sm90_ctas(p, tiles, sm_count), 1, 1},
          .block = {variant.threads(), 1, 1},
          .dynamic_shared_bytes = variant.shared_bytes()};
}

TensorMapSpec dq_accumulator_map(const FlashBwdParams& b) {
  TensorMapSpec m;
  m.address = b.dq_accum;
  m.rank = 5;
  m.element_bytes = 4;
  m.fp32 = true;
  // Row 8 a + 4 b + c as (b, c, a): the box's shared-memory rows run
  // b + 2 c + 8 a (see the header).
  const auto row_bytes = 4 * static_cast<std::uint64_t>(b.heads_q) * static_cast<std::uint64_t>(b.head_dim_k);
  m.dims = {static_cast<std::uint64_t>(b.head_dim_k), 2, 4, static_cast<std::uint64_t>(b.rows / 8),
            static_cast<std::uint64_t>(b.heads_q)};
  m.strides = {4 * row_bytes, row_bytes, 8 * row_bytes, 4 * static_cast<std::uint64_t>(b.head_dim_k)};
  m.box = {32, 2, 4, static_cast<std::uint32_t>(kDqTileRows / 8), 1};
  m.swizzle = sm90::Swizzle::k128B;
  return m;
}

}  // namespace attune
