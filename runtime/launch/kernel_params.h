// What every attention kernel's params struct shares, filled in one place:
// the problem's sizes, mask and scale, the tensors' element strides, whether
// their rows allow 16-byte cp.async loads, and the index arrays in backend
// memory. The params structs (templates/) use the same field names.
#pragma once

#include <cstdint>
#include <numbers>

#include "core/problem.h"
#include "templates/dropout.h"
#include "templates/flash_tile.cuh"
#include "templates/score_mods.cuh"

namespace attune {

// cp.async moves 16 bytes: every row of the tensor must start on a 16-byte
// boundary, so the base and every stride (in 2-byte elements) must allow it.
inline bool rows_aligned(const void* base, const TensorStrides& s, bool packed = false) {
  return reinterpret_cast<std::uintptr_t>(base) % 16 == 0 && (packed || s.batch % 8 == 0) && s.seq % 8 == 0 &&
         s.head % 8 == 0;
}

// One tensor's three strides into the params fields that hold them.
inline void put_strides(i64& batch, i64& row, i64& head, const TensorStrides& s) {
  batch = s.batch;
  row = s.seq;
  head = s.head;
}

// The Q, K, V (16-bit inputs), O and LSE pointers of a forward-shaped call.
template <class Params>
void set_tensors(Params& k, const AttentionBuffers& b) {
  k.q = static_cast<const u16*>(b.q);
  k.k = static_cast<const u16*>(b.k);
  k.v = static_cast<const u16*>(b.v);
  k.o = static_cast<u16*>(b.o);
  k.lse = b.lse;
}

// O and LSE strides only (the decode combine kernel writes just these).
template <class Params>
void set_output_strides(Params& k, const AttentionProblem& p) {
  put_strides(k.o_batch_stride, k.o_row_stride, k.o_head_stride, p.o_strides);
  put_strides(k.lse_batch_stride, k.lse_row_stride, k.lse_head_stride, p.lse_strides);
}

// Q, K, V, O and LSE strides of `p` into a params struct with the fields
// q_batch_stride, q_row_stride, q_head_stride, ... lse_head_stride.
template <class Params>
void set_strides(Params& k, const AttentionProblem& p) {
  put_strides(k.q_batch_stride, k.q_row_stride, k.q_head_stride, p.q_strides);
  put_strides(k.k_batch_stride, k.k_row_stride, k.k_head_stride, p.k_strides);
  put_strides(k.v_batch_stride, k.v_row_stride, k.v_head_stride, p.v_strides);
  set_output_strides(k, p);
}

// The score modifiers' values (backend memory) as the kernels take them;
// only the ones the problem uses are set.
inline ScoreModParams score_mod_params(const AttentionProblem& p, const float* sinks, const float* alibi_slopes) {
  ScoreModParams m{};
  m.softcap = static_cast<float>(p.modifiers.softcap);
  m.sinks = p.modifiers.sinks ? sinks : nullptr;
  m.alibi_slopes = p.modifiers.alibi != AlibiSlopes::kNone ? alibi_slopes : nullptr;
  m.alibi_batch_stride = p.modifiers.alibi == AlibiSlopes::kPerBatchHead ? p.heads_q : 0;
  return m;
}

// Dropout's params (templates/dropout.h), zero when the problem has none;
// `rng_state`: the call's {seed, offset} in backend memory, or null (the
// problem's values).
inline DropoutParams dropout_params_of(const AttentionProblem& p, const std::uint64_t* rng_state) {
  if (!p.modifiers.dropout()) return DropoutParams{};
  DropoutParams d = dropout_params(p.modifiers.dropout_p, p.modifiers.seed, p.modifiers.offset);
  d.state = reinterpret_cast<const u64*>(rng_state);
  return d;
}

// The sizes, mask and base-2 scale every attention kernel takes.
template <class Params>
void set_problem_fields(Params& k, const AttentionProblem& p) {
  k.seqlen_q = static_cast<i32>(p.seqlen_q);
  k.seqlen_k = static_cast<i32>(p.seqlen_k);
  k.heads_q = static_cast<i32>(p.heads_q);
  k.group_size = static_cast<i32>(p.group_size());
  k.head_dim_k = static_cast<i32>(p.head_dim_k);
  k.head_dim_v = static_cast<i32>(p.head_dim_v);
  k.mask = mask_params(p.mask);
  k.scale_log2 = static_cast<float>(p.softmax_scale() * std::numbers::log2e);
}

// fp8 inputs: their stored formats and descales (Fp8Inputs).
inline i32 stored_format(DType dtype) {
  return dtype == DType::kE4M3 ? kStoredE4M3 : dtype == DType::kE5M2 ? kStoredE5M2 : kStored16;
}
inline Fp8Inputs fp8_inputs_of(const AttentionProblem& p, const AttentionBuffers& b) {
  return {stored_format(p.dtype),  stored_format(p.k_dtype()), b.q_descale, b.k_descale, b.v_descale,
          p.descale_strides.batch, p.descale_strides.head};
}

}  // namespace attune
