// The C API's problem struct to the C++ contract.
#include "runtime/c_problem.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace attune {
namespace {

TensorStrides strides_of(const int64_t (&s)[3]) { return {.batch = s[0], .seq = s[1], .head = s[2]}; }

bool all_zero(const int64_t (&s)[3]) { return s[0] == 0 && s[1] == 0 && s[2] == 0; }

// The int a C enum field holds, without loading it as the C++ enum.
template <class Enum>
int enum_field(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int));
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

}  // namespace

AttentionProblem problem_from_c(const attune_problem& c, const std::optional<LengthBounds>& device_lengths) {
  // A C caller may store any int in an enum field; in C++ loading such a
  // value as the enum is undefined, so the fields are read as ints.
  const int dtype = enum_field(c.dtype);
  const int mask = enum_field(c.mask);
  if (dtype < ATTUNE_DTYPE_FP16 || dtype > ATTUNE_DTYPE_E5M2) {
    throw InvalidArgument("dtype: got " + std::to_string(dtype) +
                          "; expected ATTUNE_DTYPE_FP16, ATTUNE_DTYPE_BF16, ATTUNE_DTYPE_E4M3 or ATTUNE_DTYPE_E5M2");
  }
  constexpr DType kDTypes[] = {DType::kF16, DType::kBF16, DType::kE4M3, DType::kE5M2};
  AttentionProblem p;
  p.dtype = kDTypes[dtype];
  const int kv_dtype = enum_field(c.kv_dtype);
  if (kv_dtype == ATTUNE_DTYPE_E4M3 || kv_dtype == ATTUNE_DTYPE_E5M2) p.kv_dtype = kDTypes[kv_dtype];
  p.descale_strides = {.batch = c.descale_strides[0], .head = c.descale_strides[1]};
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim_k = c.head_dim_k;
  p.head_dim_v = c.head_dim_v;
  if (c.scale != 0) p.scale = c.scale;
  switch (mask) {
    case ATTUNE_MASK_NONE:
      break;
    case ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT:
      p.mask = Mask::causal_bottom_right();
      break;
    case ATTUNE_MASK_CAUSAL_TOP_LEFT:
      p.mask = Mask::causal_top_left();
      break;
    case ATTUNE_MASK_SLIDING_WINDOW:
      p.mask = Mask::window(c.window_left, c.window_right);
      break;
    default:
      throw InvalidArgument("mask: got " + std::to_string(mask) + "; expected one of ATTUNE_MASK_*");
  }
  // The length arrays are read before validation: their counts must not
  // overflow (the sizes are int32 on the device).
  constexpr int64_t kInt32Max = 2147483647;
  if (c.batch < 0 || c.batch >= kInt32Max) {
    throw InvalidArgument("batch: got " + std::to_string(c.batch) + "; expected 0 <= batch < 2^31 - 1");
  }
  if (c.block_table != nullptr && c.max_pages > kInt32Max / (c.batch > 0 ? c.batch : 1)) {
    throw InvalidArgument("max_pages: got " + std::to_string(c.max_pages) + " with batch " + std::to_string(c.batch) +
                          "; expected batch x max_pages < 2^31");
  }
  const auto copy = [&](const int32_t* data, int64_t count) {
    return data == nullptr || count < 0 ? std::vector<int32_t>{} : std::vector<int32_t>(data, data + count);
  };
  // Modifiers: the tensors travel in the buffers; the problem says which are on.
  p.modifiers.softcap = c.softcap;
  p.modifiers.sinks = c.sinks != nullptr;
  if (c.alibi_slopes != nullptr) {
    p.modifiers.alibi = c.alibi_per_batch != 0 ? AlibiSlopes::kPerBatchHead : AlibiSlopes::kPerHead;
  }
  p.modifiers.dropout_p = c.dropout_p;  // validated with the problem: [0, 1)
  p.modifiers.seed = c.seed;
  p.modifiers.offset = c.offset;
  p.seqlens_k = copy(c.seqlens_k, c.batch);
  p.cu_seqlens_q = copy(c.cu_seqlens_q, c.batch + 1);
  p.cu_seqlens_k = copy(c.cu_seqlens_k, c.batch + 1);
  p.device_lengths = device_lengths;
  if (device_lengths && c.page_size != 0) {
    if (c.max_pages < 1 || c.page_size < 1 || c.num_pages < 0) {
      throw InvalidArgument("paged cache: got max_pages " + std::to_string(c.max_pages) + ", page_size " +
                            std::to_string(c.page_size) + ", num_pages " + std::to_string(c.num_pages) +
                            "; expected max_pages >= 1, page_size >= 1, num_pages >= 0 (the block table is "
                            "passed to each run)");
    }
    p.page_size = c.page_size;
    p.num_pages = c.num_pages;
  } else if (c.page_size != 0 || c.block_table != nullptr) {
    if (c.block_table == nullptr || c.max_pages < 1 || c.page_size < 1 || c.num_pages < 0) {
      throw InvalidArgument("paged cache: got block_table " + std::string(c.block_table ? "set" : "NULL") +
                            ", max_pages " + std::to_string(c.max_pages) + ", page_size " +
                            std::to_string(c.page_size) + ", num_pages " + std::to_string(c.num_pages) +
                            "; expected a block table with max_pages >= 1, page_size >= 1, num_pages >= 0");
    }
    p.block_table = copy(c.block_table, c.batch * c.max_pages);
    p.page_size = c.page_size;
    p.num_pages = c.num_pages;
  }
  set_contiguous_strides(p);
  if (!all_zero(c.q_strides)) p.q_strides = strides_of(c.q_strides);
  if (!all_zero(c.k_strides)) p.k_strides = strides_of(c.k_strides);
  if (!all_zero(c.v_strides)) p.v_strides = strides_of(c.v_strides);
  if (!all_zero(c.o_strides)) p.o_strides = strides_of(c.o_strides);
  if (!all_zero(c.lse_strides)) p.lse_strides = strides_of(c.lse_strides);
  return p;  // validated by the call it is handed to (core/problem.h), once
}

}  // namespace attune
