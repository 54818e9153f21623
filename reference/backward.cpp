#include "reference/backward.h"

#include <cmath>
#include <cstddef>

#include "reference/reference.h"

namespace attune {

namespace {

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// The first `count` stored elements as fp64, in the same layout, so the fp64
// overload can read them with the problem's strides.
std::vector<double> widen(DType dtype, const std::uint16_t* bits, int64_t count) {
  return widen_bits<double>(dtype, {bits, static_cast<std::size_t>(count)});
}

int64_t batches_of(const AttentionProblem& p) { return p.is_packed() ? 1 : p.batch; }

std::size_t at(int64_t index) { return static_cast<std::size_t>(index); }

}  // namespace

int64_t reference_dq_index(const AttentionProblem& p, int64_t b, int64_t row, int64_t head) {
  const int64_t batch_rows = p.is_packed() ? 0 : b * p.seqlen_q;
  return ((batch_rows + row) * p.heads_q + head) * p.head_dim_k;
}

int64_t reference_dk_index(const AttentionProblem& p, int64_t b, int64_t row, int64_t kv_head) {
  const int64_t batch_rows = p.is_packed() ? 0 : b * p.seqlen_k;
  return ((batch_rows + row) * p.heads_kv + kv_head) * p.head_dim_k;
}

int64_t reference_dv_index(const AttentionProblem& p, int64_t b, int64_t row, int64_t kv_head) {
  const int64_t batch_rows = p.is_packed() ? 0 : b * p.seqlen_k;
  return ((batch_rows + row) * p.heads_kv + kv_head) * p.head_dim_v;
}

ReferenceGradients reference_backward(const AttentionProblem& p, const double* q, const double* k, const double* v,
                                      const double* d_o, const ModifierTensors& modifiers) {
  // O and LSE of the very forward being differentiated (it validates p and
  // the modifiers' values).
  const ReferenceOutput fwd = reference_forward(p, q, k, v, modifiers);
  const ModifierValues mods(p, modifiers);
  const int64_t batches = batches_of(p);
  ReferenceGradients g;
  g.dq.assign(at(batches * p.seqlen_q * p.heads_q * p.head_dim_k), 0.0);
  g.dk.assign(at(batches * p.seqlen_k * p.heads_kv * p.head_dim_k), 0.0);
  g.dv.assign(at(batches * p.seqlen_k * p.heads_kv * p.head_dim_v), 0.0);
  if (mods.has_sinks()) g.dsink.assign(at(p.heads_q), 0.0);
  const double scale = p.softmax_scale();
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent seq = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = p.kv_head_of(h);
      for (int64_t i = 0; i < seq.q_len; ++i) {
        const KeyRange keys = visible_keys(p.mask, i, seq.q_len, seq.k_len);
        // O_i is 0 whatever Q, K, V and the sink are: no gradient flows (D_i = 0).
        if (keys.empty()) continue;
        const int64_t row = seq.q_begin + i;
        const double* q_row = q + element_offset(p.q_strides, b, row, h);
        const double* do_row = d_o + reference_o_index(p, b, row, h);
        const double* o_row = &fwd.o[at(reference_o_index(p, b, row, h))];
        const double lse = fwd.lse[at(reference_lse_index(p, b, row, h))];
        // D_i = dO_i . O_i = sum_j P_ij dP_ij, with O (and dP) after dropout.
        const double row_d = dot(do_row, o_row, p.head_dim_v);
        // The sink's weight exp(sink - LSE_i) times dO_i . (0 - O_i).
        if (mods.has_sinks()) g.dsink[at(h)] -= std::exp(mods.sink(h) - lse) * row_d;
        double* dq_row = &g.dq[at(reference_dq_index(p, b, row, h))];
        for (int64_t j = keys.begin; j < keys.end; ++j) {
          const int64_t key = seq.k_begin + j;
          const double* k_row = k + element_offset(p.k_strides, b, key, hk);
          const double* v_row = v + element_offset(p.v_strides, b, key, hk);
          const double x = scale * dot(q_row, k_row, p.head_dim_k);
          const double prob = std::exp(mods.cap(x) + mods.bias(b, h, i, j, seq) - lse);
          // O_i = sum_j P_ij w_ij v_j: the dropout weight w_ij is a constant
          // factor of both V's gradient and P's.
          const double weight = mods.dropout_weight(b, h, i, j);
          const double d_prob = weight * dot(do_row, v_row, p.head_dim_v);
          const double d_score = prob * (d_prob - row_d);
          const double d_x = d_score * mods.cap_gradient(x);  // through tanh; the ALiBi term is constant
          double* dk_row = &g.dk[at(reference_dk_index(p, b, key, hk))];
          double* dv_row = &g.dv[at(reference_dv_index(p, b, key, hk))];
          for (int64_t d = 0; d < p.head_dim_v; ++d) dv_row[d] += prob * weight * do_row[d];
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dq_row[d] += scale * d_x * k_row[d];
            dk_row[d] += scale * d_x * q_row[d];
          }
        }
      }
    }
  }
  return g;
}

ReferenceGradients reference_backward(const AttentionProblem& p, const std::uint16_t* q, const std::uint16_t* k,
                                      const std::uint16_t* v, const std::uint16_t* d_o,
                                      const ModifierTensors& modifiers) {
  validate(p);  // the extents below assume valid strides
  const std::vector<double> q64 = widen(p.dtype, q, q_extent(p));
  const std::vector<double> k64 = widen(p.dtype, k, k_extent(p));
  const std::vector<double> v64 = widen(p.dtype, v, v_extent(p));
  const std::vector<double> do64 = widen(p.dtype, d_o, batches_of(p) * p.seqlen_q * p.heads_q * p.head_dim_v);
  return reference_backward(p, q64.data(), k64.data(), v64.data(), do64.data(), modifiers);
}

}  // namespace attune
