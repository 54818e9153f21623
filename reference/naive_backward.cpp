#include "reference/backward_accuracy.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attune {

namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

ReferenceGradients naive_storage_backward(const AttentionProblem& p, const std::uint16_t* q_bits,
                                          const std::uint16_t* k_bits, const std::uint16_t* v_bits,
                                          const std::uint16_t* do_bits, const ModifierTensors& modifiers) {
  validate(p);
  const ModifierValues mods(p, modifiers);
  const auto r = [&](float x) { return round_to(p.dtype, x); };
  const auto f = [&](const std::uint16_t* t, int64_t off) { return bits_to_float(p.dtype, t[off]); };
  const int64_t batches = p.is_packed() ? 1 : p.batch;
  std::vector<float> dq(at(batches * p.seqlen_q * p.heads_q * p.head_dim_k), 0.0F);
  std::vector<float> dk(at(batches * p.seqlen_k * p.heads_kv * p.head_dim_k), 0.0F);
  std::vector<float> dv(at(batches * p.seqlen_k * p.heads_kv * p.head_dim_v), 0.0F);
  const auto scale = static_cast<float>(p.softmax_scale());
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = p.kv_head_of(h);
      const auto sink = static_cast<float>(mods.sink(h));  // -inf without sinks
      // This head's per-key sums before rounding: dK and dV of the head.
      std::vector<float> dk_head(at(s.k_len * p.head_dim_k), 0.0F);
      std::vector<float> dv_head(at(s.k_len * p.head_dim_v), 0.0F);
      for (int64_t i = 0; i < s.q_len; ++i) {
        const KeyRange keys = visible_keys(p.mask, i, s.q_len, s.k_len);
        if (keys.empty()) continue;
        const int64_t row = s.q_begin + i;
        std::vector<float> q_scaled(at(p.head_dim_k));
        for (int64_t d = 0; d < p.head_dim_k; ++d) {
          q_scaled[at(d)] = r(scale * f(q_bits, element_offset(p.q_strides, b, row, h) + d));
        }
        const int64_t n = keys.end - keys.begin;
        std::vector<float> scores(at(n));  // q' k in fp32: what the softcap's gradient reads
        std::vector<float> prob(at(n));
        std::vector<float> d_prob(at(n));
        float max_logit = sink;
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += q_scaled[at(d)] * f(k_bits, element_offset(p.k_strides, b, s.k_begin + keys.begin + j, hk) + d);
          }
          scores[at(j)] = dot;
          // Without modifiers cap(dot) + 0 is dot: naive_storage_backward's rounding.
          prob[at(j)] = r(static_cast<float>(mods.cap(dot) + mods.bias(b, h, i, keys.begin + j, s)));
          max_logit = std::max(max_logit, prob[at(j)]);
        }
        float sum = mods.has_sinks() ? std::exp(sink - max_logit) : 0.0F;
        for (float x : prob) sum += std::exp(x - max_logit);
        for (float& x : prob) x = r(std::exp(x - max_logit) / sum);
        const std::uint16_t* d_o = do_bits + reference_o_index(p, b, row, h);
        // With dropout, autograd's dropout node: P' = r(P w) is what multiplies
        // V, and dP = r(dP' w) what the softmax backward reads.
        std::vector<float> weight(at(n), 1.0F);
        std::vector<float> kept(prob);
        if (mods.has_dropout()) {
          for (int64_t j = 0; j < n; ++j) {
            weight[at(j)] = static_cast<float>(mods.dropout_weight(b, h, i, keys.begin + j));
            kept[at(j)] = r(prob[at(j)] * weight[at(j)]);
          }
        }
        float row_d = 0;  // the softmax backward's sum_j P_ij dP_ij (the sink's value, and dP, is 0)
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            dot += bits_to_float(p.dtype, d_o[d]) *
                   f(v_bits, element_offset(p.v_strides, b, s.k_begin + keys.begin + j, hk) + d);
          }
          d_prob[at(j)] = mods.has_dropout() ? r(r(dot) * weight[at(j)]) : r(dot);
          row_d += prob[at(j)] * d_prob[at(j)];
        }
        std::vector<float> dq_row(at(p.head_dim_k), 0.0F);
        for (int64_t j = 0; j < n; ++j) {
          // Through the cap's gradient (1 without softcap).
          const float d_score =
              r(prob[at(j)] * (d_prob[at(j)] - row_d) * static_cast<float>(mods.cap_gradient(scores[at(j)])));
          const int64_t key = keys.begin + j;
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            dv_head[at(key * p.head_dim_v + d)] += kept[at(j)] * bits_to_float(p.dtype, d_o[d]);
          }
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dq_row[at(d)] += d_score * f(k_bits, element_offset(p.k_strides, b, s.k_begin + key, hk) + d);
            dk_head[at(key * p.head_dim_k + d)] += d_score * q_scaled[at(d)];
          }
        }
        for (int64_t d = 0; d < p.head_dim_k; ++d) {
          dq[at(reference_dq_index(p, b, row, h) + d)] = r(scale * r(dq_row[at(d)]));
        }
      }
      // Each head's gradient rounds as autograd's per-head product does; the group then sums.
      for (int64_t j = 0; j < s.k_len; ++j) {
        for (int64_t d = 0; d < p.head_dim_k; ++d) {
          dk[at(reference_dk_index(p, b, s.k_begin + j, hk) + d)] += r(dk_head[at(j * p.head_dim_k + d)]);
        }
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          dv[at(reference_dv_index(p, b, s.k_begin + j, hk) + d)] += r(dv_head[at(j * p.head_dim_v + d)]);
        }
      }
    }
  }
  ReferenceGradients g;
  g.dq.assign(dq.begin(), dq.end());
  for (float x : dk) g.dk.push_back(r(x));
  for (float x : dv) g.dv.push_back(r(x));
  return g;
}

}  // namespace attune
