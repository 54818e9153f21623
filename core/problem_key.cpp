#include "core/problem_key.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/enum_names.h"

namespace attune {

constexpr NamedValue<Op> kOpNames[] = {{Op::kForward, "fwd"}, {Op::kDecode, "decode"}, {Op::kBackward, "bwd"}};

std::string_view to_string(Op op) { return name_of(kOpNames, op); }

std::optional<Op> parse_op(std::string_view name) { return value_of(kOpNames, name); }

std::optional<UnknownKeyName> parse_key_names(std::string_view op, std::string_view dtype, std::string_view mask,
                                              ProblemKey& key) {
  if (const auto o = parse_op(op)) {
    key.op = *o;
  } else {
    return UnknownKeyName{"op", std::string(op), "fwd, decode or bwd"};
  }
  if (const auto d = parse_storage_name(dtype)) {
    key.dtype = d->dtype;
    key.kv_dtype = d->kv_dtype;
  } else {
    return UnknownKeyName{"dtype", std::string(dtype), "fp16, bf16, e4m3 or e5m2, or fp16/bf16-kv-e4m3/e5m2"};
  }
  if (const auto m = parse_mask_kind(mask)) {
    key.mask = *m;
  } else {
    return UnknownKeyName{"mask", std::string(mask), "none, causal-bottom-right, causal-top-left or window"};
  }
  return std::nullopt;
}

std::int8_t bucket_log2(std::int64_t size) {
  std::int8_t e = 0;
  while ((std::int64_t{1} << e) < size && e < 62) ++e;
  return e;
}

std::uint64_t ProblemKey::hash() const {
  // FNV-1a over the fields; no allocation.
  std::uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFFU;
      h *= 1099511628211ULL;
    }
  };
  mix(static_cast<std::uint64_t>(op));
  mix(static_cast<std::uint64_t>(dtype));
  mix(kv_dtype ? static_cast<std::uint64_t>(*kv_dtype) + 1 : 0);
  mix(static_cast<std::uint64_t>(head_dim_k));
  mix(static_cast<std::uint64_t>(head_dim_v));
  mix(static_cast<std::uint64_t>(mask));
  mix(static_cast<std::uint64_t>(seqlen_q_log2));
  mix(static_cast<std::uint64_t>(seqlen_k_log2));
  mix(static_cast<std::uint64_t>(batch_heads_log2));
  mix(static_cast<std::uint64_t>(modifiers));
  return h;
}

std::string ProblemKey::to_string() const {
  return std::string(attune::to_string(op)) + "/" + storage_name(dtype, kv_dtype) + "/dk" + std::to_string(head_dim_k) +
         "/dv" + std::to_string(head_dim_v) + "/" + std::string(attune::to_string(mask)) + "/sq2^" +
         std::to_string(seqlen_q_log2) + "/sk2^" + std::to_string(seqlen_k_log2) + "/bh2^" +
         std::to_string(batch_heads_log2) + (modifiers != 0 ? "/" + modifier_names(modifiers) : std::string());
}

ProblemKey problem_key(Op op, const AttentionProblem& p) {
  const std::int64_t max_q = p.max_seqlen_q();
  std::int64_t max_k = p.max_seqlen_k();
  ProblemKey key;
  key.op = op;
  key.dtype = p.dtype;
  if (p.k_dtype() != p.dtype) key.kv_dtype = p.k_dtype();
  key.head_dim_k = static_cast<std::int32_t>(p.head_dim_k);
  key.head_dim_v = static_cast<std::int32_t>(p.head_dim_v);
  key.mask = p.mask.kind;
  key.seqlen_q_log2 = bucket_log2(max_q);
  key.seqlen_k_log2 = bucket_log2(max_k);
  key.batch_heads_log2 = bucket_log2(p.batch * p.heads_q);
  key.modifiers = modifier_bits(p.modifiers);
  if (op == Op::kDecode) {
    max_k = p.max_seqlen_k(true);                             // the longest cache
    key.seqlen_q_log2 = bucket_log2(max_q * p.group_size());  // the rows of a KV head, as the kernel packs them
    key.seqlen_k_log2 = bucket_log2(max_k);
    key.batch_heads_log2 = bucket_log2(p.batch * p.heads_kv);
  }
  return key;
}

int bucket_distance(const ProblemKey& a, const ProblemKey& b) {
  if (a.op != b.op || a.dtype != b.dtype || a.kv_dtype != b.kv_dtype || a.head_dim_k != b.head_dim_k ||
      a.head_dim_v != b.head_dim_v || a.mask != b.mask || a.modifiers != b.modifiers) {
    return std::numeric_limits<int>::max();
  }
  return std::abs(a.seqlen_q_log2 - b.seqlen_q_log2) + std::abs(a.seqlen_k_log2 - b.seqlen_k_log2) +
         std::abs(a.batch_heads_log2 - b.batch_heads_log2);
}

}  // namespace attune
