// The params of a forward call, shared by the forward kernel families
// (flash_fwd, flash_fwd_sm90).
#pragma once

#include "templates/dropout.h"
#include "templates/flash_tile.cuh"

namespace attune {

// Problem sizes and pointers of one forward call (device memory). Strides
// are in elements; index arrays are null when unused. flash_fwd_sm90 holds
// it as a member, with its own fields after it.
struct FlashFwdBase {
  const u16* q;  // [B, Sq, Hq, Dk] or packed [Tq, Hq, Dk]
  const u16* k;  // [B, Sk, Hkv, Dk], or the page pool [pages, page_size, Hkv, Dk]
  const u16* v;  // [B, Sk, Hkv, Dv], or the page pool [pages, page_size, Hkv, Dv]
  u16* o;        // [B, Sq, Hq, Dv]
  float* lse;    // [B, Hq, Sq] or packed [Hq, Tq]; null: not written
  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;  // batch stride: the page stride when paged
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 lse_batch_stride, lse_row_stride, lse_head_stride;
  const i32* cu_seqlens_q;  // [B+1] packed row offsets
  const i32* cu_seqlens_k;  // [B+1] packed key offsets; null: K and V per sequence (or paged)
  const i32* seqlens_k;     // [B] real keys per sequence (padding, or a paged cache's lengths)
  i32 seqlen_q;             // dense Sq
  i32 seqlen_k;             // dense Sk, or max_pages * page_size when paged
  i32 heads_q;
  i32 group_size;  // Hq / Hkv
  i32 head_dim_k;
  i32 head_dim_v;
  MaskParams mask;
  float scale_log2;     // softmax scale * log2(e): the kernel works in base 2
  i32 vectorized;       // 1: every row starts 16-byte aligned, so tiles load with cp.async
  ScoreModParams mods;  // read only by variants that compile modifiers in
  KeyPages pages;       // a paged KV cache (chunked prefill over it), read by variants with kPaged
};

// flash_fwd's params: the shared part, then what was added after it (at the
// end, so the fields before keep their offsets and variants without the
// feature their code).
struct FlashFwdParams : FlashFwdBase {
  DropoutParams dropout;  // read only by variants with kDropout
  Fp8Inputs fp8;          // read only by variants with kFp8: q, k, v then point at their stored bytes
};

}  // namespace attune
