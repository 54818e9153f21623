// Appending a step's new keys and values to a KV cache, with rotary
// embedding of the new keys and of Q (Runtime::append_kv): the part of
// flash-attn's flash_attn_with_kvcache(k=, v=, rotary_cos=, rotary_sin=)
// that runs before attention (templates/kv_append.cuh).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/problem.h"

namespace attune {

struct AppendProblem {
  DType dtype = DType::kBF16;
  int64_t batch = 0;
  int64_t seqlen_new = 0;  // new keys per sequence
  int64_t heads_kv = 1;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  TensorStrides k_new_strides;  // [B, Snew, Hkv, Dk], in elements
  TensorStrides v_new_strides;  // [B, Snew, Hkv, Dv]
  // The cache: contiguous [cache_batch, seqlen_cache, Hkv, D] (page_size 0),
  // or page pools [num_pages, page_size, Hkv, D] read through a block table
  // [B, max_pages] (the batch strides are then the page strides).
  int64_t cache_batch = 0;
  int64_t seqlen_cache = 0;
  int64_t page_size = 0;
  int64_t num_pages = 0;
  int64_t max_pages = 0;
  TensorStrides k_cache_strides;
  TensorStrides v_cache_strides;
  // Rotary embedding (rotary_dim 0: none): cos and sin contiguous
  // [seqlen_ro, rotary_dim / 2]; pairs (2j, 2j + 1) when interleaved, (j, j
  // + rotary_dim / 2) otherwise.
  int64_t rotary_dim = 0;
  int64_t seqlen_ro = 0;
  bool rotary_interleaved = false;
  // Q [B, seqlen_q, Hq, Dk] rotated into q_rot (seqlen_q 0: Q not rotated):
  // row i at position cache_seqlens + i when q_per_row (a causal or local
  // mask), every row at cache_seqlens otherwise.
  int64_t seqlen_q = 0;
  int64_t heads_q = 0;
  TensorStrides q_strides;
  TensorStrides q_rot_strides;
  bool q_per_row = false;

  bool is_paged() const { return page_size != 0; }
  // Keys one sequence's row addresses.
  int64_t capacity() const { return is_paged() ? max_pages * page_size : seqlen_cache; }
};

// Device (or emulator) memory of one append. cache_seqlens [B] int32: the
// keys each sequence holds before the step (its new keys go there);
// seqlens_out [B] int32 receives cache_seqlens + seqlen_new.
struct AppendBuffers {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const void* q = nullptr;
  void* q_rot = nullptr;
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  const int32_t* cache_seqlens = nullptr;
  int32_t* seqlens_out = nullptr;
  const int32_t* block_table = nullptr;
};

// Sizes, strides and pointers (InvalidArgument naming the value and what
// was expected): fp16 or bf16; head dims 1..256 with rotary_dim even, at
// most Dk and a multiple of 16 as flash-attn asks; a rotary table covering
// every row position (seqlen_ro >= capacity); a block table with pages.
void validate(const AppendProblem& problem, const AppendBuffers& buffers);

// Elements each tensor spans (highest offset + 1).
int64_t k_new_extent(const AppendProblem& problem);
int64_t v_new_extent(const AppendProblem& problem);
int64_t k_cache_extent(const AppendProblem& problem);
int64_t v_cache_extent(const AppendProblem& problem);
int64_t q_rot_extent(const AppendProblem& problem);
int64_t q_source_extent(const AppendProblem& problem);

}  // namespace attune
