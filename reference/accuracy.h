// FlashAttention's accuracy rule: a kernel's error against the fp64 oracle
// may be at most a multiple of the error of the same attention computed
// naively in the storage dtype, plus a small floor. Used by the tests and by
// the tuner's correctness gate.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"

namespace attune {

// Attention as a framework computes it in the storage dtype: S = q.k in fp32
// rounded to the dtype, softmax in fp32 rounded to the dtype, O = P V in fp32
// rounded to the dtype. LSE stays fp32.
// `q`, `k`, `v`: 16-bit storage of p.dtype in the problem's layout. Score
// modifiers apply to the fp32 logit before it is rounded; a sink joins the
// fp32 sum; dropout scales the rounded probability (rounded again).
// The loops of naive_storage_attention: `read(which, offset)` gives element
// `offset` of Q (0), K (1) or V (2) as a float, intermediates rounded to
// `dtype`, the probabilities to `p_dtype` first (fp8 attention's P V runs
// on fp8 P). Contiguous or packed K and V.
template <class Read>
ReferenceOutput naive_attention(const AttentionProblem& p, DType dtype, const Read& read,
                                const ModifierTensors& modifiers, DType p_dtype) {
  const ModifierValues mods(p, modifiers);
  const auto round = [&](float x) { return round_to(dtype, x); };
  const auto round_p = [&](float x) { return round(round_to(p_dtype, x)); };
  constexpr int kQ = 0;
  constexpr int kK = 1;
  constexpr int kV = 2;
  ReferenceOutput out;
  const int64_t batches = p.is_packed() ? 1 : p.batch;
  out.o.assign(static_cast<std::size_t>(batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(static_cast<std::size_t>(batches * p.heads_q * p.seqlen_q), -std::numeric_limits<double>::infinity());
  const auto scale = static_cast<float>(p.softmax_scale());
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const KeyRange keys = visible_keys(p.mask, i, s.q_len, s.k_len);
        const auto sink = static_cast<float>(mods.sink(h));
        if (keys.empty()) {
          if (mods.has_sinks()) out.lse[static_cast<std::size_t>(reference_lse_index(p, b, s.q_begin + i, h))] = sink;
          continue;
        }
        std::vector<float> logits;
        float max_logit = sink;  // -inf without sinks
        for (int64_t j = keys.begin; j < keys.end; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot += read(kQ, element_offset(p.q_strides, b, s.q_begin + i, h) + d) *
                   read(kK, element_offset(p.k_strides, b, s.k_begin + j, p.kv_head_of(h)) + d);
          }
          logits.push_back(round(static_cast<float>(mods.cap(dot * scale) + mods.bias(b, h, i, j, s))));
          max_logit = std::max(max_logit, logits.back());
        }
        float sum = mods.has_sinks() ? std::exp(sink - max_logit) : 0.0F;
        for (float x : logits) sum += std::exp(x - max_logit);
        const int64_t row = s.q_begin + i;
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          float acc = 0;
          for (int64_t j = keys.begin; j < keys.end; ++j) {
            float prob = round_p(std::exp(logits[static_cast<std::size_t>(j - keys.begin)] - max_logit) / sum);
            // Dropout as a framework applies it: to the rounded probability, rounded again.
            if (mods.has_dropout()) prob = round(static_cast<float>(prob * mods.dropout_weight(b, h, i, j)));
            acc += prob * read(kV, element_offset(p.v_strides, b, s.k_begin + j, p.kv_head_of(h)) + d);
          }
          out.o[static_cast<std::size_t>(reference_o_index(p, b, row, h) + d)] = round(acc);
        }
        out.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))] = max_logit + std::log(sum);
      }
    }
  }
  return out;
}

// fp8 inputs (one element per 16-bit slot, as reference_forward takes them)
// are read as the values dequantize_inputs gives, rounded to float, and the
// intermediates to the compute dtype: the attention a framework computes
// after dequantizing, whose error the kernels' is held to. With Q, K and V
// in fp8 (FlashAttention-3's fp8 attention) P is rounded to their format
// too, as FlashAttention-3's fp8 P V takes it (docs/contract.md).
inline ReferenceOutput naive_storage_attention(const AttentionProblem& p, const std::uint16_t* q_bits,
                                               const std::uint16_t* k_bits, const std::uint16_t* v_bits,
                                               const ModifierTensors& modifiers = {}) {
  if (p.has_fp8()) {
    const DequantizedInputs in = dequantize_inputs(p, q_bits, k_bits, v_bits, modifiers);
    const std::vector<double>* tensors[] = {&in.q, &in.k, &in.v};
    return naive_attention(
        in.problem, p.compute_dtype(),
        [&](int which, int64_t offset) {
          return static_cast<float>((*tensors[which])[static_cast<std::size_t>(offset)]);
        },
        modifiers, is_fp8(p.dtype) ? p.dtype : p.compute_dtype());
  }
  if (p.is_paged()) {
    const UnpagedKv cache = unpage_kv(p, k_bits, v_bits);
    return naive_storage_attention(cache.problem, q_bits, cache.k.data(), cache.v.data(), modifiers);
  }
  const std::uint16_t* tensors[] = {q_bits, k_bits, v_bits};
  return naive_attention(
      p, p.dtype, [&](int which, int64_t offset) { return bits_to_float(p.dtype, tensors[which][offset]); }, modifiers,
      p.dtype);
}

struct AccuracyErrors {
  double o = 0;          // max |O - O_ref|
  double lse = 0;        // max |LSE - LSE_ref| over finite entries
  std::string mismatch;  // NaN, or -inf / zero rows that disagree; empty if none
};

inline AccuracyErrors accuracy_errors(const ReferenceOutput& got, const ReferenceOutput& want) {
  AccuracyErrors e;
  for (std::size_t i = 0; i < got.o.size(); ++i) {
    if (std::isnan(got.o[i])) {
      e.mismatch = "O[" + std::to_string(i) + "] is NaN";
      return e;
    }
    e.o = std::max(e.o, std::abs(got.o[i] - want.o[i]));
  }
  for (std::size_t i = 0; i < got.lse.size(); ++i) {
    const bool got_empty = std::isinf(got.lse[i]) && got.lse[i] < 0;
    const bool want_empty = std::isinf(want.lse[i]) && want.lse[i] < 0;
    if (std::isnan(got.lse[i]) || got_empty != want_empty) {
      e.mismatch =
          "LSE[" + std::to_string(i) + "] = " + std::to_string(got.lse[i]) + ", want " + std::to_string(want.lse[i]);
      return e;
    }
    if (!want_empty) e.lse = std::max(e.lse, std::abs(got.lse[i] - want.lse[i]) / (1 + std::abs(want.lse[i])));
  }
  return e;
}

// True when `got` passes the rule: O error <= factor x naive + 1e-5 (LSE
// relative, floor 1e-5), matching empty rows, no NaN. `why` explains a failure.
inline bool within_accuracy_rule(const ReferenceOutput& got, const ReferenceOutput& want, const ReferenceOutput& naive,
                                 double factor, std::string* why) {
  const AccuracyErrors g = accuracy_errors(got, want);
  const AccuracyErrors n = accuracy_errors(naive, want);
  if (!g.mismatch.empty()) {
    *why = g.mismatch;
    return false;
  }
  const double o_limit = factor * n.o + 1e-5;
  const double lse_limit = factor * n.lse + 1e-5;
  if (g.o > o_limit || g.lse > lse_limit) {
    *why = "O error " + std::to_string(g.o) + " (limit " + std::to_string(o_limit) + "), LSE error " +
           std::to_string(g.lse) + " (limit " + std::to_string(lse_limit) + ")";
    return false;
  }
  return true;
}

}  // namespace attune
