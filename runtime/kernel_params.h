// What every attention kernel's params struct shares, filled in one place:
// the tensors' element strides and whether their rows allow 16-byte cp.async
// loads. The params structs (templates/) use the same field names.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace attune {

// cp.async moves 16 bytes: every row of the tensor must start on a 16-byte
// boundary, so the base and every stride (in 2-byte elements) must allow it.
inline bool rows_aligned(const void* base, const TensorStrides& s, bool packed = false) {
  return reinterpret_cast<std::uintptr_t>(base) % 16 == 0 && (packed || s.batch % 8 == 0) && s.seq % 8 == 0 &&
         s.head % 8 == 0;
}

// O and LSE strides only (the decode combine kernel writes just these).
template <class Params>
void set_output_strides(Params& k, const AttentionProblem& p) {
  k.o_batch_stride = p.o_strides.batch;
  k.o_row_stride = p.o_strides.seq;
  k.o_head_stride = p.o_strides.head;
  k.lse_batch_stride = p.lse_strides.batch;
  k.lse_row_stride = p.lse_strides.seq;
  k.lse_head_stride = p.lse_strides.head;
}

// Q, K, V, O and LSE strides of `p` into a params struct with the fields
// q_batch_stride, q_row_stride, q_head_stride, ... lse_head_stride.
template <class Params>
void set_strides(Params& k, const AttentionProblem& p) {
  k.q_batch_stride = p.q_strides.batch;
  k.q_row_stride = p.q_strides.seq;
  k.q_head_stride = p.q_strides.head;
  k.k_batch_stride = p.k_strides.batch;
  k.k_row_stride = p.k_strides.seq;
  k.k_head_stride = p.k_strides.head;
  k.v_batch_stride = p.v_strides.batch;
  k.v_row_stride = p.v_strides.seq;
  k.v_head_stride = p.v_strides.head;
  set_output_strides(k, p);
}

}  // namespace attune
