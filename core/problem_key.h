// The problem key: what the tuning database and the dispatcher index by.
// Op, dtype, head dims, mask kind, and power-of-two buckets of the sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/problem.h"

namespace attune {

enum class Op : std::uint8_t { kForward, kDecode, kBackward };

std::string_view to_string(Op op);  // "fwd", "decode", "bwd"
std::optional<Op> parse_op(std::string_view name);

// A plain value (no allocation), hashable and comparable on the hot path.
struct ProblemKey {
  Op op = Op::kForward;
  DType dtype = DType::kBF16;
  std::optional<DType> kv_dtype;  // an fp8 KV cache under 16-bit queries; unset: dtype
  std::int32_t head_dim_k = 0;
  std::int32_t head_dim_v = 0;
  MaskKind mask = MaskKind::kNone;
  // log2 of the power-of-two bucket (ceiling) of each size: 0 for sizes 0
  // and 1, 1 for 2, 2 for 3..4, 3 for 5..8, ...
  std::int8_t seqlen_q_log2 = 0;
  std::int8_t seqlen_k_log2 = 0;
  std::int8_t batch_heads_log2 = 0;
  // Score modifiers in use (kModSoftcap | kModSinks | kModAlibi): kernels
  // with and without them are different instantiations, tuned apart.
  std::uint8_t modifiers = 0;

  bool operator==(const ProblemKey&) const = default;
  std::uint64_t hash() const;
  // "fwd/bf16/dk128/dv128/causal-bottom-right/sq2^10/sk2^12/bh2^5" (the
  // dtype part is storage_name's: "decode/bf16-kv-e4m3/..."), with
  // "/softcap+sinks" (modifier_names) appended when modifiers are in use
  std::string to_string() const;
};

// A name of a key's enumerated part that this version does not know: the
// field, the value read, and what was expected.
struct UnknownKeyName {
  const char* field;
  std::string value;
  const char* expected;
};
// Sets key.op, key.dtype (and kv_dtype) and key.mask from their names ("fwd", "bf16" or "bf16-kv-e4m3",
// "causal-bottom-right"); the first unknown name, if any (the others are
// then left as they were).
std::optional<UnknownKeyName> parse_key_names(std::string_view op, std::string_view dtype, std::string_view mask,
                                              ProblemKey& key);

// The bucket exponent of a size: smallest e with 2^e >= size.
std::int8_t bucket_log2(std::int64_t size);

// Sequence lengths are the longest sequence's (packed: from cu_seqlens);
// batch x heads counts query heads. Decode keys the cache: Sq x (Hq / Hkv)
// query rows per KV head, the longest cache length, and batch x KV heads
// (the CTAs a split multiplies).
ProblemKey problem_key(Op op, const AttentionProblem& problem);

// Distance between two keys of the same op, dtype, head dims, mask and modifiers: the
// sum of the bucket-exponent differences of the sizes (each doubling or
// halving counts 1). Keys that differ in anything else are infinitely far.
int bucket_distance(const ProblemKey& a, const ProblemKey& b);

}  // namespace attune
