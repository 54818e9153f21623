#include "runtime/launch/flash_fwd_params.h"

#include <algorithm>

#include "generated/kernel_shapes.h"

namespace attune {

FlashFwdParams flash_fwd_params(const AttentionProblem& p, const AttentionBuffers& b, const DeviceMetadata& metadata) {
  FlashFwdParams k{};
  set_tensors(k, b);
  set_strides(k, p);
  k.cu_seqlens_q = p.is_packed() ? metadata.cu_seqlens_q : nullptr;
  k.cu_seqlens_k = p.has_packed_keys() ? metadata.cu_seqlens_k : nullptr;
  k.seqlens_k = p.has_seqlens_k() ? metadata.seqlens_k : nullptr;
  set_problem_fields(k, p);
  k.mods = score_mod_params(p, b.sinks, b.alibi_slopes);
  k.dropout = dropout_params_of(p, b.rng_state);
  k.fp8 = fp8_inputs_of(p, b);
  if (p.is_paged()) {
    k.pages = {metadata.block_table, static_cast<i32>(p.max_pages()), static_cast<i32>(p.page_size),
               static_cast<i32>(p.num_pages)};
  }
  const bool packed_keys = p.has_packed_keys();
  k.vectorized = rows_aligned(b.q, p.q_strides, p.is_packed()) && rows_aligned(b.k, p.k_strides, packed_keys) &&
                         rows_aligned(b.v, p.v_strides, packed_keys)
                     ? 1
                     : 0;
  return k;
}

LaunchConfig flash_fwd_launch(const AttentionProblem& p, const Variant& variant) {
  return query_block_launch(p, variant, FlashFwdShape::of(variant).block_m);
}

LaunchConfig query_block_launch(const AttentionProblem& p, const Variant& variant, std::int64_t block_m) {
  const std::int64_t blocks = (p.max_seqlen_q() + block_m - 1) / block_m;
  return {.grid = {static_cast<i32>(std::max<std::int64_t>(blocks, 1)), static_cast<i32>(p.heads_q),
                   static_cast<i32>(std::max<std::int64_t>(p.batch, 1))},
          .block = {variant.threads(), 1, 1},
          .dynamic_shared_bytes = variant.shared_bytes()};
}

}  // namespace attune
