// Inputs re-laid for TMA: the seed families' tiny head dims give rows a few
// elements apart, which no tensor map can describe (global strides are
// multiples of 16 bytes). Each head's row of Q, K and V moves to a slot of
// a multiple of 8 elements (the gap holds NaN: a kernel that reads it
// shows); O stays contiguous. The problem is the same attention.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/support/families.h"

namespace attune::testing {

inline Inputs with_tma_strides(const Inputs& in) {
  Inputs out = in;
  AttentionProblem& p = out.problem;
  const auto relay = [](const std::vector<std::uint16_t>& from, TensorStrides& strides, std::int64_t batches,
                        std::int64_t rows, std::int64_t heads, std::int64_t head_dim, bool packed) {
    const TensorStrides old = strides;
    const std::int64_t slot = (head_dim + 7) / 8 * 8;
    TensorStrides s{packed ? 0 : rows * heads * slot, heads * slot, slot};
    std::vector<std::uint16_t> to(static_cast<std::size_t>((packed ? 1 : batches) * rows * heads * slot), 0x7FFF);
    for (std::int64_t b = 0; b < (packed ? 1 : batches); ++b)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t d = 0; d < head_dim; ++d) {
            to[static_cast<std::size_t>(b * s.batch + r * s.seq + h * s.head + d)] =
                from[static_cast<std::size_t>(b * old.batch + r * old.seq + h * old.head + d)];
          }
    strides = s;
    return to;
  };
  out.q = relay(in.q, p.q_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim_k, p.is_packed());
  out.k = relay(in.k, p.k_strides, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_k, p.has_packed_keys());
  out.v = relay(in.v, p.v_strides, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v, p.has_packed_keys());
  return out;
}

}  // namespace attune::testing
