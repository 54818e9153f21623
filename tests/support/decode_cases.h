// Decode problems: a few query rows per sequence against a KV cache held
// contiguously [B, Smax, Hkv, D] with per-sequence lengths, or paged (a
// shuffled block table into a page pool with spare pages).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/families.h"

namespace attune::testing {

struct DecodeCase {
  std::string name;
  int64_t batch = 1;
  int64_t seqlen_q = 1;
  int64_t heads_q = 8;
  int64_t heads_kv = 1;
  int64_t head_dim_k = 32;
  int64_t head_dim_v = 32;
  std::vector<int32_t> cache_seqlens;  // [B]
  int64_t page_size = 0;               // 0: contiguous
  // Packed queries (mixed prefill and decode): each sequence's query rows,
  // cu_seqlens_q made from them; empty: seqlen_q rows each, dense.
  std::vector<int32_t> query_lens;
  Mask mask = Mask::causal_bottom_right();
  DType dtype = DType::kBF16;
  std::optional<DType> kv_dtype;  // an fp8 cache
};

inline Inputs make_decode_inputs(const DecodeCase& c, unsigned seed = 1234) {
  const int64_t longest = *std::max_element(c.cache_seqlens.begin(), c.cache_seqlens.end());
  ProblemOptions options{.dtype = c.dtype, .kv_dtype = c.kv_dtype, .mask = c.mask, .seqlens_k = c.cache_seqlens};
  std::vector<int64_t> k_shape = {c.batch, longest, c.heads_kv, c.head_dim_k};
  std::vector<int64_t> v_shape = {c.batch, longest, c.heads_kv, c.head_dim_v};
  std::mt19937 rng(seed);
  if (c.page_size > 0) {
    const int64_t max_pages = std::max<int64_t>((longest + c.page_size - 1) / c.page_size, 1);
    const int64_t pages = c.batch * max_pages + 3;  // spare pages nobody reads
    std::vector<int32_t> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    options.block_table.assign(order.begin(), order.begin() + c.batch * max_pages);
    options.page_size = c.page_size;
    k_shape = {pages, c.page_size, c.heads_kv, c.head_dim_k};
    v_shape = {pages, c.page_size, c.heads_kv, c.head_dim_v};
  }
  std::vector<int64_t> q_shape = {c.batch, c.seqlen_q, c.heads_q, c.head_dim_k};
  if (!c.query_lens.empty()) {
    options.cu_seqlens_q = {0};
    for (int32_t len : c.query_lens) options.cu_seqlens_q.push_back(options.cu_seqlens_q.back() + len);
    q_shape = {options.cu_seqlens_q.back(), c.heads_q, c.head_dim_k};
  }
  Inputs in{make_problem(q_shape, k_shape, v_shape, std::move(options)), {}, {}, {}};
  const AttentionProblem& p = in.problem;
  in.q = random_bits(q_extent(p), p.dtype, 0.0F, 1.0F, rng);
  in.k = random_bits(k_extent(p), p.k_dtype(), 0.0F, 1.0F, rng);
  in.v = random_bits(v_extent(p), p.k_dtype(), 0.0F, 1.0F, rng);
  return in;
}

// Odd decode rows against two paged caches of unequal length (pages of 16),
// with Dv != Dk: the case every covering-set variant of decode runs.
inline DecodeCase paged_odd_case(int64_t head_dim) {
  return {.name = "3x203_paged16",
          .batch = 2,
          .seqlen_q = 3,
          .heads_q = 4,
          .heads_kv = 2,
          .head_dim_k = head_dim,
          .head_dim_v = head_dim - 8,
          .cache_seqlens = {203, 77},
          .page_size = 16};
}

// Sequences over a paged cache (pages of 16), GQA 4:2 at D = 64: one per
// cache length, with `query_lens` query rows each (packed), or one row each.
inline DecodeCase paged_gqa_case(std::string name, std::vector<int32_t> cache_seqlens,
                                 std::vector<int32_t> query_lens = {}) {
  const auto batch = static_cast<int64_t>(cache_seqlens.size());
  return {.name = std::move(name),
          .batch = batch,
          .heads_q = 4,
          .heads_kv = 2,
          .head_dim_k = 64,
          .head_dim_v = 64,
          .cache_seqlens = std::move(cache_seqlens),
          .page_size = 16,
          .query_lens = std::move(query_lens)};
}

}  // namespace attune::testing
