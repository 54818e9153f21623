// FlashAttention's accuracy rule for gradients: a kernel's dQ, dK and dV
// may be off the fp64 oracle (reference_backward) by at most a multiple of
// the error of the same backward computed naively in the storage dtype, plus
// a floor. Used by the backward kernel tests; fit for a correctness gate.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/backward.h"
#include "reference/reference.h"

namespace attune {

// Backward attention as a framework's autograd computes it in the storage
// dtype (FlashAttention's test with upcast off): products accumulate in fp32
// and round to the dtype, and so do the softmax and its backward:
//   q' = r(scale q), S = r(q' k), P = r(softmax(S)),
//   dV = r(sum_i P_ij dO_i), dP = r(dO_i . v_j), dS = r(P (dP - sum_j P dP)),
//   dQ = r(scale r(sum_j dS_ij k_j)), dK = r(sum_i dS_ij q'_i).
// Under GQA the query heads' dK and dV sum in fp32 before the last rounding.
// Inputs as reference_backward's storage overload: Q, K, V with the
// problem's strides, dO contiguous [B, Sq, Hq, Dv] (packed [Tq, Hq, Dv]);
// the result in ReferenceGradients' layout.
inline ReferenceGradients naive_storage_backward(const AttentionProblem& p, const std::uint16_t* q_bits,
                                                 const std::uint16_t* k_bits, const std::uint16_t* v_bits,
                                                 const std::uint16_t* do_bits) {
  validate(p);
  const auto r = [&](float x) { return round_to(p.dtype, x); };
  const auto f = [&](const std::uint16_t* t, int64_t off) { return bits_to_float(p.dtype, t[off]); };
  const auto at = [](int64_t i) { return static_cast<std::size_t>(i); };
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
        std::vector<float> prob(at(n));
        std::vector<float> d_prob(at(n));
        float max_logit = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += q_scaled[at(d)] * f(k_bits, element_offset(p.k_strides, b, s.k_begin + keys.begin + j, hk) + d);
          }
          prob[at(j)] = r(dot);
          max_logit = std::max(max_logit, prob[at(j)]);
        }
        float sum = 0;
        for (float x : prob) sum += std::exp(x - max_logit);
        for (float& x : prob) x = r(std::exp(x - max_logit) / sum);
        const std::uint16_t* d_o = do_bits + reference_o_index(p, b, row, h);
        float row_d = 0;  // the softmax backward's sum_j P_ij dP_ij
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
          const float d_score = r(prob[at(j)] * (d_prob[at(j)] - row_d));
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
      // Each head's gradient rounds as autograd's per-head product does;
      // the group then sums.
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

struct GradientErrors {
  double dq = 0;         // max |dQ - dQ_ref|
  double dk = 0;         // max |dK - dK_ref|
  double dv = 0;         // max |dV - dV_ref|
  std::string mismatch;  // the first NaN or infinity; empty if none
};

inline GradientErrors gradient_errors(const ReferenceGradients& got, const ReferenceGradients& want) {
  GradientErrors e;
  const auto max_error = [&](const std::vector<double>& g, const std::vector<double>& w, const char* name) {
    double worst = 0;
    for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
      if (!std::isfinite(g[i])) {
        if (e.mismatch.empty())
          e.mismatch = std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(g[i]);
        continue;
      }
      worst = std::max(worst, std::abs(g[i] - w[i]));
    }
    if (g.size() != w.size() && e.mismatch.empty()) {
      e.mismatch =
          std::string(name) + " has " + std::to_string(g.size()) + " elements, want " + std::to_string(w.size());
    }
    return worst;
  };
  e.dq = max_error(got.dq, want.dq, "dQ");
  e.dk = max_error(got.dk, want.dk, "dK");
  e.dv = max_error(got.dv, want.dv, "dV");
  return e;
}

// The floor of the rule for one gradient: twice the rounding error the
// storage dtype makes on values of the reference's size, FlashAttention 3's
// atol = 2 * max |(ref + 0.3 - 0.3) - ref| with every step rounded, plus 1e-6.
inline double gradient_floor(DType dtype, const std::vector<double>& want) {
  double worst = 0;
  for (double x : want) {
    const float ref = round_to(dtype, static_cast<float>(x));
    const float shifted = round_to(dtype, round_to(dtype, ref + 0.3F) - 0.3F);
    worst = std::max(worst, std::abs(static_cast<double>(shifted) - static_cast<double>(ref)));
  }
  return 2 * worst + 1e-6;
}

// True when `got` passes the rule: for each of dQ, dK and dV, error <=
// factor x the naive error + the floor, and no NaN or infinity anywhere.
// `why` explains a failure.
inline bool within_gradient_rule(const ReferenceGradients& got, const ReferenceGradients& want,
                                 const ReferenceGradients& naive, DType dtype, double factor, std::string* why) {
  const GradientErrors g = gradient_errors(got, want);
  const GradientErrors n = gradient_errors(naive, want);
  if (!g.mismatch.empty()) {
    *why = g.mismatch;
    return false;
  }
  const double limits[] = {factor * n.dq + gradient_floor(dtype, want.dq),
                           factor * n.dk + gradient_floor(dtype, want.dk),
                           factor * n.dv + gradient_floor(dtype, want.dv)};
  const double errors[] = {g.dq, g.dk, g.dv};
  const char* names[] = {"dQ", "dK", "dV"};
  bool ok = true;
  *why = "";
  for (int i = 0; i < 3; ++i) {
    if (errors[i] > limits[i]) {
      ok = false;
      *why += std::string(names[i]) + " error " + std::to_string(errors[i]) + " (limit " + std::to_string(limits[i]) +
              ", naive " +
              std::to_string(i == 0   ? n.dq
                             : i == 1 ? n.dk
                                      : n.dv) +
              ") ";
    }
  }
  return ok;
}

}  // namespace attune
