#include "core/append_problem.h"

#include <string>

#include "core/error.h"

namespace attune {

namespace {

[[noreturn]] void reject(const std::string& what, const std::string& seen, const std::string& expected) {
  throw InvalidArgument("append " + what + ": got " + seen + "; expected " + expected);
}

std::string str(int64_t v) { return std::to_string(v); }

constexpr int64_t kInt32Max = 2147483647;

void check_size(const char* what, int64_t value, int64_t least) {
  if (value < least || value > kInt32Max) reject(what, str(value), str(least) + "..2^31 - 1");
}

void check_strides(const TensorStrides& s, const char* name) {
  if (s.batch < 0 || s.seq < 0 || s.head < 0) {
    reject(std::string(name) + " strides", "(" + str(s.batch) + ", " + str(s.seq) + ", " + str(s.head) + ")",
           "non-negative element strides");
  }
}

}  // namespace

void validate(const AppendProblem& p, const AppendBuffers& b) {
  check_size("batch", p.batch, 0);
  check_size("new keys (seqlen_new)", p.seqlen_new, 0);
  check_size("KV heads", p.heads_kv, 1);
  if (p.head_dim_k < 1 || p.head_dim_k > kMaxHeadDim) {
    reject("key head dim", str(p.head_dim_k), "1.." + str(kMaxHeadDim));
  }
  if (p.head_dim_v < 1 || p.head_dim_v > kMaxHeadDim) {
    reject("value head dim", str(p.head_dim_v), "1.." + str(kMaxHeadDim));
  }
  for (const auto& [s, name] :
       {std::pair{&p.k_new_strides, "k"}, std::pair{&p.v_new_strides, "v"}, std::pair{&p.k_cache_strides, "k_cache"},
        std::pair{&p.v_cache_strides, "v_cache"}, std::pair{&p.q_strides, "q"}, std::pair{&p.q_rot_strides, "q_rot"}}) {
    check_strides(*s, name);
  }
  if (p.is_paged()) {
    check_size("page size", p.page_size, 1);
    check_size("pages in the pool", p.num_pages, 1);
    check_size("block table columns (max pages)", p.max_pages, 1);
    if (p.max_pages * p.page_size > kInt32Max) {
      reject("block table capacity", str(p.max_pages) + " x " + str(p.page_size), "below 2^31 keys");
    }
    if (b.block_table == nullptr && p.batch > 0) reject("block table", "null", "[B, max_pages] int32 page indices");
  } else {
    check_size("cache rows (cache batch)", p.cache_batch, p.batch > 0 ? 1 : 0);
    check_size("cache keys per row (seqlen_k of the cache)", p.seqlen_cache, 1);
    if (p.cache_batch < p.batch) {
      reject("cache rows (cache batch)", str(p.cache_batch),
             "at least the batch " + str(p.batch) + " (a row per sequence; cache_batch_idx reads the cache as pages)");
    }
  }
  if (p.rotary_dim != 0) {
    if (p.rotary_dim < 0 || p.rotary_dim > p.head_dim_k || p.rotary_dim % 16 != 0) {
      reject("rotary dim (2 x rotary_cos.shape[1])", str(p.rotary_dim),
             "a multiple of 16 up to the head dim " + str(p.head_dim_k));
    }
    if (p.seqlen_ro < p.capacity()) {
      reject("rotary table rows (rotary_cos.shape[0])", str(p.seqlen_ro),
             "at least " + str(p.capacity()) + ", the keys a cache row holds");
    }
  }
  if (p.seqlen_q != 0) {
    if (p.rotary_dim == 0) reject("query rotation", "no rotary table", "rotary_dim > 0 to rotate Q");
    check_size("query rows (seqlen_q)", p.seqlen_q, 1);
    check_size("query heads", p.heads_q, 1);
    if (p.heads_q % p.heads_kv != 0) {
      reject("query heads", str(p.heads_q), "a multiple of the " + str(p.heads_kv) + " KV heads");
    }
  }
  // Pointers: an empty append (a plan loading its kernel) needs none.
  if (p.batch == 0) return;
  if (p.rotary_dim != 0 && (b.rotary_cos == nullptr || b.rotary_sin == nullptr)) {
    reject("rotary tables", "a null cos or sin", "both rotary_cos and rotary_sin [seqlen_ro, rotary_dim / 2]");
  }
  if (p.seqlen_q != 0 && (b.q == nullptr || b.q_rot == nullptr)) {
    reject("query rotation", "a null q or q_rot", "both set");
  }
  if (p.seqlen_new == 0) return;
  if (b.k_new == nullptr || b.v_new == nullptr) reject("new keys and values", "a null k or v", "both set");
  if (b.k_cache == nullptr || b.v_cache == nullptr) reject("cache", "a null k_cache or v_cache", "both set");
  if (b.cache_seqlens == nullptr) reject("cache_seqlens", "null", "[B] int32, the keys each sequence holds");
  if (b.seqlens_out == nullptr) reject("seqlens_out", "null", "[B] int32 for cache_seqlens + seqlen_new");
}

int64_t k_new_extent(const AppendProblem& p) {
  return tensor_extent(p.k_new_strides, p.batch, p.seqlen_new, p.heads_kv, p.head_dim_k);
}
int64_t v_new_extent(const AppendProblem& p) {
  return tensor_extent(p.v_new_strides, p.batch, p.seqlen_new, p.heads_kv, p.head_dim_v);
}
int64_t k_cache_extent(const AppendProblem& p) {
  if (p.is_paged()) return tensor_extent(p.k_cache_strides, p.num_pages, p.page_size, p.heads_kv, p.head_dim_k);
  return tensor_extent(p.k_cache_strides, p.cache_batch, p.seqlen_cache, p.heads_kv, p.head_dim_k);
}
int64_t v_cache_extent(const AppendProblem& p) {
  if (p.is_paged()) return tensor_extent(p.v_cache_strides, p.num_pages, p.page_size, p.heads_kv, p.head_dim_v);
  return tensor_extent(p.v_cache_strides, p.cache_batch, p.seqlen_cache, p.heads_kv, p.head_dim_v);
}
int64_t q_source_extent(const AppendProblem& p) {
  return tensor_extent(p.q_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim_k);
}
int64_t q_rot_extent(const AppendProblem& p) {
  return tensor_extent(p.q_rot_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim_k);
}

}  // namespace attune
