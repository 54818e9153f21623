#include "runtime/launch/kv_append_params.h"

#include <algorithm>

#include "generated/kernel_shapes.h"
#include "runtime/launch/kernel_params.h"

namespace attune {

const Variant& kv_append_variant() {
  static const Variant kAppend = only_variant(KernelId::kKvAppend);
  return kAppend;
}

KvAppendParams kv_append_params(const AppendProblem& p, const AppendBuffers& b) {
  KvAppendParams k{};
  k.k_new = static_cast<const u16*>(b.k_new);
  k.v_new = static_cast<const u16*>(b.v_new);
  k.k_cache = static_cast<u16*>(b.k_cache);
  k.v_cache = static_cast<u16*>(b.v_cache);
  k.q = p.seqlen_q != 0 ? static_cast<const u16*>(b.q) : nullptr;
  k.q_rot = static_cast<u16*>(b.q_rot);
  k.rotary_cos = static_cast<const u16*>(b.rotary_cos);
  k.rotary_sin = static_cast<const u16*>(b.rotary_sin);
  k.cache_seqlens = b.cache_seqlens;
  k.seqlens_out = b.seqlens_out;
  k.pages = {p.is_paged() ? b.block_table : nullptr, static_cast<i32>(p.max_pages), static_cast<i32>(p.page_size),
             static_cast<i32>(p.num_pages)};
  put_strides(k.kn_batch_stride, k.kn_row_stride, k.kn_head_stride, p.k_new_strides);
  put_strides(k.vn_batch_stride, k.vn_row_stride, k.vn_head_stride, p.v_new_strides);
  put_strides(k.k_batch_stride, k.k_row_stride, k.k_head_stride, p.k_cache_strides);
  put_strides(k.v_batch_stride, k.v_row_stride, k.v_head_stride, p.v_cache_strides);
  put_strides(k.q_batch_stride, k.q_row_stride, k.q_head_stride, p.q_strides);
  put_strides(k.qr_batch_stride, k.qr_row_stride, k.qr_head_stride, p.q_rot_strides);
  k.batch = static_cast<i32>(p.batch);
  k.seqlen_new = static_cast<i32>(p.seqlen_new);
  k.heads_kv = static_cast<i32>(p.heads_kv);
  k.seqlen_q = static_cast<i32>(p.seqlen_q);
  k.heads_q = static_cast<i32>(p.heads_q);
  k.head_dim_k = static_cast<i32>(p.head_dim_k);
  k.head_dim_v = static_cast<i32>(p.head_dim_v);
  k.capacity = static_cast<i32>(p.capacity());
  k.rotary_dim = static_cast<i32>(p.rotary_dim);
  k.rotary_interleaved = p.rotary_interleaved ? 1 : 0;
  k.seqlen_ro = static_cast<i32>(p.seqlen_ro);
  k.q_per_row = p.q_per_row ? 1 : 0;
  return k;
}

LaunchConfig kv_append_launch(const AppendProblem& p) {
  const Variant& append = kv_append_variant();
  const std::int64_t warps = KvAppendShape::of(append).warps;
  const std::int64_t slots = p.batch * p.seqlen_new * p.heads_kv + p.batch * p.seqlen_q * p.heads_q;
  return {.grid = {static_cast<i32>(std::max<std::int64_t>((slots + warps - 1) / warps, 1)), 1, 1},
          .block = {append.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

}  // namespace attune
