#include "tuner/naive_modified.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attune::tuner {

namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// One row's scores as the framework forms them: x = the scaled score (what
// the softcap's gradient reads), s = the logit after the modifiers.
struct RowScores {
  std::vector<float> x;
  std::vector<float> s;
};

// The modifiers on scaled scores already rounded: cap, round, add the ALiBi
// term, round. Without modifiers each step returns its input exactly.
float modified_logit(DType dtype, const ModifierValues& mods, float x, int64_t b, int64_t h, int64_t i, int64_t j,
                     const SequenceExtent& seq) {
  const float capped = round_to(dtype, static_cast<float>(mods.cap(x)));
  return round_to(dtype, capped + static_cast<float>(mods.bias(b, h, i, j, seq)));
}

// Softmax of the logits with the sink as one more term, in fp32, each
// probability rounded to the dtype; returns the row's log-sum-exp.
float softmax_in_place(DType dtype, std::vector<float>& logits, double sink) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, x);
  const auto sink_logit = static_cast<float>(sink);  // -inf without sinks: a term e^-inf = 0
  max_logit = std::max(max_logit, sink_logit);
  float sum = 0;
  for (float x : logits) sum += std::exp(x - max_logit);
  if (std::isfinite(sink_logit)) sum += std::exp(sink_logit - max_logit);
  for (float& x : logits) x = round_to(dtype, std::exp(x - max_logit) / sum);
  return max_logit + std::log(sum);
}

}  // namespace

ReferenceOutput naive_modified_attention(const AttentionProblem& p, const std::uint16_t* q_bits,
                                         const std::uint16_t* k_bits, const std::uint16_t* v_bits,
                                         const ModifierTensors& modifiers) {
  if (p.is_paged()) {
    const UnpagedKv cache = unpage_kv(p, k_bits, v_bits);
    return naive_modified_attention(cache.problem, q_bits, cache.k.data(), cache.v.data(), modifiers);
  }
  const ModifierValues mods(p, modifiers);
  const auto round = [&](float x) { return round_to(p.dtype, x); };
  const auto f = [&](const std::uint16_t* t, int64_t off) { return bits_to_float(p.dtype, t[off]); };
  ReferenceOutput out;
  const int64_t batches = p.is_packed() ? 1 : p.batch;
  out.o.assign(at(batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(at(batches * p.heads_q * p.seqlen_q), -std::numeric_limits<double>::infinity());
  const auto scale = static_cast<float>(p.softmax_scale());
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t row = s.q_begin + i;
        const KeyRange keys = visible_keys(p.mask, i, s.q_len, s.k_len);
        if (keys.empty()) {
          // O stays 0; with a sink the softmax has one term, the sink's.
          if (mods.has_sinks()) out.lse[at(reference_lse_index(p, b, row, h))] = mods.sink(h);
          continue;
        }
        std::vector<float> probs;
        for (int64_t j = keys.begin; j < keys.end; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += f(q_bits, element_offset(p.q_strides, b, row, h) + d) *
                   f(k_bits, element_offset(p.k_strides, b, s.k_begin + j, p.kv_head_of(h)) + d);
          }
          probs.push_back(modified_logit(p.dtype, mods, round(dot * scale), b, h, i, j, s));
        }
        out.lse[at(reference_lse_index(p, b, row, h))] = softmax_in_place(p.dtype, probs, mods.sink(h));
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          float acc = 0;
          for (int64_t j = keys.begin; j < keys.end; ++j) {
            acc += probs[at(j - keys.begin)] * f(v_bits, element_offset(p.v_strides, b, s.k_begin + j, p.kv_head_of(h)) + d);
          }
          out.o[at(reference_o_index(p, b, row, h) + d)] = round(acc);
        }
      }
    }
  }
  return out;
}

ReferenceGradients naive_modified_backward(const AttentionProblem& p, const std::uint16_t* q_bits,
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
        std::vector<float> scores(at(n));  // the scaled scores, before the modifiers
        std::vector<float> prob(at(n));
        std::vector<float> d_prob(at(n));
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += q_scaled[at(d)] * f(k_bits, element_offset(p.k_strides, b, s.k_begin + keys.begin + j, hk) + d);
          }
          scores[at(j)] = r(dot);
          prob[at(j)] = modified_logit(p.dtype, mods, scores[at(j)], b, h, i, keys.begin + j, s);
        }
        softmax_in_place(p.dtype, prob, mods.sink(h));
        const std::uint16_t* d_o = do_bits + reference_o_index(p, b, row, h);
        float row_d = 0;  // the softmax backward's sum_j P_ij dP_ij (the sink's dP is 0)
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            dot += bits_to_float(p.dtype, d_o[d]) *
                   f(v_bits, element_offset(p.v_strides, b, s.k_begin + keys.begin + j, hk) + d);
          }
          d_prob[at(j)] = r(dot);
          row_d += prob[at(j)] * d_prob[at(j)];
        }
        std::vector<float> dq_row(at(p.head_dim_k), 0.0F);
        for (int64_t j = 0; j < n; ++j) {
          // Through the cap's gradient (1 without softcap: r leaves dS as it is).
          const float d_score = r(r(prob[at(j)] * (d_prob[at(j)] - row_d)) *
                                  static_cast<float>(mods.cap_gradient(scores[at(j)])));
          const int64_t key = keys.begin + j;
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            dv_head[at(key * p.head_dim_v + d)] += prob[at(j)] * bits_to_float(p.dtype, d_o[d]);
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
  for (float x : dk) g.dk.push_back(round_to(p.dtype, x));
  for (float x : dv) g.dv.push_back(round_to(p.dtype, x));
  return g;
}

}  // namespace attune::tuner
