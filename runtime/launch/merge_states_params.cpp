#include "runtime/launch/merge_states_params.h"

#include <algorithm>
#include <string>

#include "core/problem.h"
#include "generated/kernel_shapes.h"

namespace attune {

// core owns the limit; the kernel's params hold that many pointers.
static_assert(MergeProblem::kMaxParts == kMaxMergeParts);

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
