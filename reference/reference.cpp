#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace attune {

namespace {

// The one algorithm, over any element loader: two passes per row (max, then
// exponentials) in fp64. The sink is one more term of the softmax with no
// value: it joins the max and the sum, never O's numerator.
template <typename Load>
ReferenceOutput forward(const AttentionProblem& p, const ModifierTensors& tensors, Load load) {
  validate(p);
  const ModifierValues mods(p, tensors);
  const int64_t out_batches = p.is_packed() ? 1 : p.batch;
  ReferenceOutput out;
  out.o.assign(static_cast<std::size_t>(out_batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(static_cast<std::size_t>(out_batches * p.heads_q * p.seqlen_q),
                 -std::numeric_limits<double>::infinity());
  const double scale = p.softmax_scale();
  std::vector<double> logits;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent seq = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = p.kv_head_of(h);
      const double sink = mods.sink(h);
      for (int64_t i = 0; i < seq.q_len; ++i) {
        const int64_t row = seq.q_begin + i;
        const KeyRange keys = visible_keys(p.mask, i, seq.q_len, seq.k_len);
        if (keys.empty()) {
          // O stays 0; LSE is log(e^sink), or stays -inf without sinks.
          out.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))] = sink;
          continue;
        }
        const int64_t q_off = element_offset(p.q_strides, b, row, h);
        logits.assign(static_cast<std::size_t>(keys.end - keys.begin), 0.0);
        double max_logit = sink;
        for (int64_t j = keys.begin; j < keys.end; ++j) {
          const int64_t k_off = element_offset(p.k_strides, b, seq.k_begin + j, hk);
          double dot = 0.0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) dot += load(0, q_off + d) * load(1, k_off + d);
          const double s = mods.cap(scale * dot) + mods.bias(b, h, i, j, seq);
          logits[static_cast<std::size_t>(j - keys.begin)] = s;
          max_logit = std::max(max_logit, s);
        }
        double sum = mods.has_sinks() ? std::exp(sink - max_logit) : 0.0;
        double* o_row = &out.o[static_cast<std::size_t>(reference_o_index(p, b, row, h))];
        for (int64_t j = keys.begin; j < keys.end; ++j) {
          const double w = std::exp(logits[static_cast<std::size_t>(j - keys.begin)] - max_logit);
          sum += w;  // the softmax's mass, dropped or not: dropout acts on P, after the statistics
          const double kept = w * mods.dropout_weight(b, h, i, j);
          const int64_t v_off = element_offset(p.v_strides, b, seq.k_begin + j, hk);
          for (int64_t d = 0; d < p.head_dim_v; ++d) o_row[d] += kept * load(2, v_off + d);
        }
        for (int64_t d = 0; d < p.head_dim_v; ++d) o_row[d] /= sum;
        out.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))] = max_logit + std::log(sum);
      }
    }
  }
  return out;
}

}  // namespace

ModifierValues::ModifierValues(const AttentionProblem& p, const ModifierTensors& tensors)
    : softcap_(p.modifiers.softcap),
      sinks_(p.modifiers.sinks ? tensors.sinks : nullptr),
      alibi_slopes_(p.modifiers.alibi != AlibiSlopes::kNone ? tensors.alibi_slopes : nullptr),
      slope_batch_stride_(p.modifiers.alibi == AlibiSlopes::kPerBatchHead ? p.heads_q : 0),
      dropout_(p.modifiers.dropout()),
      dropout_params_(
          dropout_params(p.modifiers.dropout() ? p.modifiers.dropout_p : 0.0, p.modifiers.seed, p.modifiers.offset)),
      keep_scale_(1.0 / (1.0 - p.modifiers.dropout_p)),
      heads_(p.heads_q) {
  check_modifier_values(p, tensors);
}

double ModifierValues::cap(double x) const { return softcap_ != 0 ? softcap_ * std::tanh(x / softcap_) : x; }

double ModifierValues::cap_gradient(double x) const {
  if (softcap_ == 0) return 1.0;
  const double t = std::tanh(x / softcap_);
  return 1.0 - t * t;
}

double ModifierValues::bias(int64_t b, int64_t h, int64_t i, int64_t j, const SequenceExtent& seq) const {
  if (alibi_slopes_ == nullptr) return 0.0;
  const double slope = alibi_slopes_[b * slope_batch_stride_ + h];
  return -slope * static_cast<double>(std::abs(i + seq.k_len - seq.q_len - j));
}

double ModifierValues::sink(int64_t h) const {
  return sinks_ != nullptr ? static_cast<double>(sinks_[h]) : -std::numeric_limits<double>::infinity();
}

double ModifierValues::dropout_weight(int64_t b, int64_t h, int64_t i, int64_t j) const {
  if (!dropout_) return 1.0;
  return dropout_keeps(dropout_params_, b, h, heads_, i, j) ? keep_scale_ : 0.0;
}

int64_t reference_o_index(const AttentionProblem& p, int64_t b, int64_t row, int64_t head) {
  const int64_t batch_rows = p.is_packed() ? 0 : b * p.seqlen_q;
  return ((batch_rows + row) * p.heads_q + head) * p.head_dim_v;
}

int64_t reference_lse_index(const AttentionProblem& p, int64_t b, int64_t row, int64_t head) {
  const int64_t batch_heads = p.is_packed() ? 0 : b * p.heads_q;
  return (batch_heads + head) * p.seqlen_q + row;
}

DequantizedInputs dequantize_inputs(const AttentionProblem& p, const std::uint16_t* q, const std::uint16_t* k,
                                    const std::uint16_t* v, const ModifierTensors& descales) {
  if (p.is_paged()) {
    const UnpagedKv cache = unpage_kv(p, k, v);
    return dequantize_inputs(cache.problem, q, cache.k.data(), cache.v.data(), descales);
  }
  DequantizedInputs out{p, {}, {}, {}};
  const auto factor = [&](const float* descale, int64_t b, int64_t kv_head) {
    return descale == nullptr
               ? 1.0
               : static_cast<double>(descale[b * p.descale_strides.batch + kv_head * p.descale_strides.head]);
  };
  // Every element of every sequence's rows (padding rows stay 0: no row reads them).
  const auto widen = [&](std::vector<double>& to, const std::uint16_t* from, DType dtype, const float* descale,
                         const TensorStrides& strides, int64_t extent, bool keys, int64_t heads, int64_t dim) {
    to.assign(static_cast<std::size_t>(extent), 0.0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const SequenceExtent seq = p.sequence(b);
      const int64_t begin = keys ? seq.k_begin : seq.q_begin;
      const int64_t rows = keys ? seq.k_capacity : seq.q_len;
      const int64_t batch = (keys ? p.has_packed_keys() : p.is_packed()) ? 0 : b;
      for (int64_t r = begin; r < begin + rows; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          const double f = factor(descale, b, keys ? h : p.kv_head_of(h));
          const int64_t at = element_offset(strides, batch, r, h);
          for (int64_t d = 0; d < dim; ++d) {
            to[static_cast<std::size_t>(at + d)] = static_cast<double>(bits_to_float(dtype, from[at + d])) * f;
          }
        }
      }
    }
  };
  widen(out.q, q, p.dtype, descales.q_descale, p.q_strides, q_extent(p), false, p.heads_q, p.head_dim_k);
  widen(out.k, k, p.k_dtype(), descales.k_descale, p.k_strides, k_extent(p), true, p.heads_kv, p.head_dim_k);
  widen(out.v, v, p.k_dtype(), descales.v_descale, p.v_strides, v_extent(p), true, p.heads_kv, p.head_dim_v);
  return out;
}

ReferenceOutput reference_forward(const AttentionProblem& p, const std::uint16_t* q, const std::uint16_t* k,
                                  const std::uint16_t* v, const ModifierTensors& modifiers) {
  if (p.has_fp8()) {
    const DequantizedInputs in = dequantize_inputs(p, q, k, v, modifiers);
    return reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data(), modifiers);
  }
  if (p.is_paged()) {
    const UnpagedKv cache = unpage_kv(p, k, v);
    return reference_forward(cache.problem, q, cache.k.data(), cache.v.data(), modifiers);
  }
  const std::uint16_t* tensors[] = {q, k, v};
  return forward(p, modifiers, [&](int which, int64_t offset) {
    return static_cast<double>(bits_to_float(p.dtype, tensors[which][offset]));
  });
}

ReferenceOutput reference_forward(const AttentionProblem& p, const double* q, const double* k, const double* v,
                                  const ModifierTensors& modifiers) {
  if (p.is_paged()) {
    throw InvalidArgument("reference_forward (fp64 values): a paged KV cache; expected contiguous K and V");
  }
  const double* tensors[] = {q, k, v};
  return forward(p, modifiers, [&](int which, int64_t offset) { return tensors[which][offset]; });
}

}  // namespace attune
