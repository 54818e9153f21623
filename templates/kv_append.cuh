// Appending a step's new keys and values to a KV cache, with rotary
// embedding: what flash-attn's flash_attn_with_kvcache(k=, v=, rotary_cos=,
// rotary_sin=) does before its attention, here as one small kernel launched
// first on the same stream.
//
// New key t of sequence b lands at cache position cache_seqlens[b] + t of
// the sequence's row (contiguous [B, Smax, Hkv, D], or through its block
// table; a contiguous cache read through cache_batch_idx is a table of one
// page per row, page_size = Smax). With rotary the stored key is the rotated
// one (position cache_seqlens[b] + t) and Q is rotated into q_rot: row i at
// cache_seqlens[b] + i for a causal or local mask, every row at
// cache_seqlens[b] otherwise (flash-attn's rule). V is copied as given.
// seqlens_out[b] = cache_seqlens[b] + Snew: the lengths the attention reads.
//
// The rotation of a pair (x0, x1) at position p by (c, s) = (cos, sin)[p, j]
// is (x0 c - x1 s, x0 s + x1 c), in fp32 and rounded once: pairs are (2j,
// 2j + 1) when interleaved (GPT-J), (j, j + rotary_dim / 2) otherwise
// (GPT-NeoX); dims from rotary_dim on are copied.
#pragma once

#include "templates/flash_tile.cuh"

namespace attune {

struct KvAppendParams {
  const u16* k_new;          // [B, Snew, Hkv, Dk]
  const u16* v_new;          // [B, Snew, Hkv, Dv]
  u16* k_cache;              // [B, Smax, Hkv, Dk], or the page pool [pages, page_size, Hkv, Dk]
  u16* v_cache;              // [B, Smax, Hkv, Dv], or the page pool
  const u16* q;              // [B, Sq, Hq, Dk]; null: no query rotation
  u16* q_rot;                // [B, Sq, Hq, Dk]: Q rotated
  const u16* rotary_cos;     // [seqlen_ro, rotary_dim / 2]
  const u16* rotary_sin;     // [seqlen_ro, rotary_dim / 2]
  const i32* cache_seqlens;  // [B] the keys in the cache before this step
  i32* seqlens_out;          // [B] cache_seqlens + Snew
  KeyPages pages;            // block_table null: contiguous
  i64 kn_batch_stride, kn_row_stride, kn_head_stride;
  i64 vn_batch_stride, vn_row_stride, vn_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;  // batch stride: the page stride when paged
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 qr_batch_stride, qr_row_stride, qr_head_stride;
  i32 batch;
  i32 seqlen_new;
  i32 heads_kv;
  i32 seqlen_q;
  i32 heads_q;
  i32 head_dim_k;
  i32 head_dim_v;
  i32 capacity;            // keys one sequence's row addresses: Smax, or max_pages x page_size
  i32 rotary_dim;          // 0: no rotary
  i32 rotary_interleaved;  // 1: pairs (2j, 2j + 1); 0: (j, j + rotary_dim / 2)
  i32 seqlen_ro;           // rows of rotary_cos and rotary_sin
  i32 q_per_row;           // 1: query row i at position cache_seqlens + i; 0: every row at cache_seqlens
};

struct KvAppendTunables : WarpPerRowTunables {};

namespace append_detail {

// Row `from` rotated (the first rotary_dim dims, by the table's row
// `position`) or copied into row `to`: one warp, lanes over the pairs.
template <class D>
ATTUNE_DEVICE void rotate_row(const KvAppendParams& p, const u16* from, u16* to, i32 head_dim, i64 position) {
  const i32 lane = dev::lane_id();
  const i32 half = p.rotary_dim / 2;
  const u16* cos_row = p.rotary_cos + position * half;
  const u16* sin_row = p.rotary_sin + position * half;
  for (i32 j = lane; j < half; j += kWarpSize) {
    const i32 a = p.rotary_interleaved != 0 ? 2 * j : j;
    const i32 b = p.rotary_interleaved != 0 ? 2 * j + 1 : j + half;
    const float x0 = dev::to_float<D>(dev::load_global(from + a));
    const float x1 = dev::to_float<D>(dev::load_global(from + b));
    const float c = dev::to_float<D>(dev::load_global(cos_row + j));
    const float s = dev::to_float<D>(dev::load_global(sin_row + j));
    dev::store_global(to + a, dev::to_bits<D>(x0 * c - x1 * s));
    dev::store_global(to + b, dev::to_bits<D>(x0 * s + x1 * c));
  }
  for (i32 col = p.rotary_dim + lane; col < head_dim; col += kWarpSize) {
    dev::store_global(to + col, dev::load_global(from + col));
  }
}

// A rotary table row for a position the host did not see (device lengths):
// the nearest row inside the table. The key write itself is bounded by the
// row's capacity (reported), which the host keeps within the table.
ATTUNE_DEVICE i64 table_row(i64 position, i32 seqlen_ro) {
  return position < 0 ? 0 : position >= seqlen_ro ? seqlen_ro - 1 : position;
}

}  // namespace append_detail

// Grid: (ceil((B x Snew x Hkv + B x Sq x Hq when Q is rotated) / kWarps));
// block: kWarps x 32 threads. One warp per new (key, KV head) row, then one
// per (query row, head) to rotate.
template <int kWarps, class DType>
ATTUNE_KERNEL void kv_append(KvAppendParams p) {
  using D = DType;
  const i64 key_slots = static_cast<i64>(p.batch) * p.seqlen_new * p.heads_kv;
  const i64 query_slots = p.q != nullptr ? static_cast<i64>(p.batch) * p.seqlen_q * p.heads_q : 0;
  const i64 slot = static_cast<i64>(dev::block_index().x) * kWarps + dev::warp_id();
  if (slot >= key_slots + query_slots) return;  // whole warps leave together
  const i32 lane = dev::lane_id();

  if (slot < key_slots) {
    const i32 batch = static_cast<i32>(slot / (static_cast<i64>(p.seqlen_new) * p.heads_kv));
    const i64 t = (slot / p.heads_kv) % p.seqlen_new;
    const i32 head = static_cast<i32>(slot % p.heads_kv);
    const i32 before = dev::load_global(p.cache_seqlens + batch);
    if (t == 0 && head == 0 && lane == 0) dev::store_global(p.seqlens_out + batch, before + p.seqlen_new);
    const i64 position = before + t;
    // A device length that puts the key past its row is not written (the
    // attention's own clamp then reports the same length).
    if (position < 0 || position >= p.capacity) return;
    if (p.pages.block_table != nullptr) {
      const i32 page = dev::load_global(p.pages.block_table + static_cast<i64>(batch) * p.pages.block_table_stride +
                                        position / p.pages.page_size);
      if (page < 0 || page >= p.pages.num_pages) {  // never written: reported, as a read of it would be
        if (lane == 0) {
          dev::report_bounds(kBoundsPage, batch, static_cast<i32>(position / p.pages.page_size), page,
                             p.pages.num_pages);
        }
        return;
      }
    }
    const u16* k_from = p.k_new + batch * p.kn_batch_stride + t * p.kn_row_stride + head * p.kn_head_stride;
    const u16* v_from = p.v_new + batch * p.vn_batch_stride + t * p.vn_row_stride + head * p.vn_head_stride;
    u16* k_to =
        p.k_cache + p.pages.key_offset(p.k_batch_stride, p.k_row_stride, head * p.k_head_stride, batch, position);
    u16* v_to =
        p.v_cache + p.pages.key_offset(p.v_batch_stride, p.v_row_stride, head * p.v_head_stride, batch, position);
    append_detail::rotate_row<D>(p, k_from, k_to, p.head_dim_k, append_detail::table_row(position, p.seqlen_ro));
    for (i32 col = lane; col < p.head_dim_v; col += kWarpSize)
      dev::store_global(v_to + col, dev::load_global(v_from + col));
    return;
  }

  const i64 q_slot = slot - key_slots;
  const i32 batch = static_cast<i32>(q_slot / (static_cast<i64>(p.seqlen_q) * p.heads_q));
  const i64 row = (q_slot / p.heads_q) % p.seqlen_q;
  const i32 head = static_cast<i32>(q_slot % p.heads_q);
  const i64 position = dev::load_global(p.cache_seqlens + batch) + (p.q_per_row != 0 ? row : 0);
  const u16* from = p.q + batch * p.q_batch_stride + row * p.q_row_stride + head * p.q_head_stride;
  u16* to = p.q_rot + batch * p.qr_batch_stride + row * p.qr_row_stride + head * p.qr_head_stride;
  append_detail::rotate_row<D>(p, from, to, p.head_dim_k, append_detail::table_row(position, p.seqlen_ro));
}

}  // namespace attune
