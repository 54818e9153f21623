#include "runtime/launch/merge_states_params.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/problem.h"
#include "generated/kernel_shapes.h"

namespace attune {

void validate(const MergeProblem& p, std::span<const void* const> o, std::span<const float* const> lse,
              const void* out_o) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) throw InvalidArgument("merge dtype: expected fp16 or bf16");
  if (p.parts < 1 || p.parts > kMaxMergeParts) {
    throw InvalidArgument("merge parts: got " + std::to_string(p.parts) + "; expected 1.." +
                          std::to_string(kMaxMergeParts) + " partial results");
  }
  if (o.size() != static_cast<std::size_t>(p.parts) || lse.size() != static_cast<std::size_t>(p.parts)) {
    throw InvalidArgument("merge inputs: got " + std::to_string(o.size()) + " O and " + std::to_string(lse.size()) +
                          " LSE pointers; expected " + std::to_string(p.parts) + " of each");
  }
  constexpr std::int64_t kInt32Max = 2147483647;
  if (p.rows < 0 || p.rows > kInt32Max) {
    throw InvalidArgument("merge rows: got " + std::to_string(p.rows) + "; expected 0..2^31 - 1");
  }
  if (p.heads < 1 || p.heads > kInt32Max) {
    throw InvalidArgument("merge heads: got " + std::to_string(p.heads) + "; expected >= 1");
  }
  if (p.head_dim < 1 || p.head_dim > kMaxHeadDim) {
    throw InvalidArgument("merge head dim: got " + std::to_string(p.head_dim) + "; expected 1.." +
                          std::to_string(kMaxHeadDim));
  }
  if (p.rows * p.heads > kInt32Max / p.head_dim) {
    throw InvalidArgument("merge size: rows x heads x head_dim = " + std::to_string(p.rows * p.heads * p.head_dim) +
                          "; expected below 2^31");
  }
  if (p.rows == 0) return;
  for (int i = 0; i < p.parts; ++i) {
    const auto at = static_cast<std::size_t>(i);
    if (o[at] == nullptr || lse[at] == nullptr) {
      throw InvalidArgument("merge part " + std::to_string(i) + ": got a null " + (o[at] == nullptr ? "O" : "LSE") +
                            " pointer; expected O [rows, heads, head_dim] and LSE [heads, rows]");
    }
  }
  if (out_o == nullptr) throw InvalidArgument("merge output O: got null; expected [rows, heads, head_dim]");
}

const Variant& merge_states_variant() {
  static const Variant kMerge = only_variant(KernelId::kMergeStates);
  return kMerge;
}

MergeStatesParams merge_states_params(const MergeProblem& p, std::span<const void* const> o,
                                      std::span<const float* const> lse, void* out_o, float* out_lse) {
  MergeStatesParams k{};
  for (int i = 0; i < p.parts; ++i) {
    k.o[i] = static_cast<const u16*>(o[static_cast<std::size_t>(i)]);
    k.lse[i] = lse[static_cast<std::size_t>(i)];
  }
  k.out_o = static_cast<u16*>(out_o);
  k.out_lse = out_lse;
  k.parts = p.parts;
  k.rows = static_cast<i32>(p.rows);
  k.heads = static_cast<i32>(p.heads);
  k.head_dim = static_cast<i32>(p.head_dim);
  return k;
}

LaunchConfig merge_states_launch(const MergeProblem& p) {
  const Variant& merge = merge_states_variant();
  const std::int64_t warps = MergeStatesShape::of(merge).warps;
  const std::int64_t slots = p.rows * p.heads;
  return {.grid = {static_cast<i32>(std::max<std::int64_t>((slots + warps - 1) / warps, 1)), 1, 1},
          .block = {merge.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

}  // namespace attune
