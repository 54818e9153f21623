#include "reference/online_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "core/error.h"

namespace attune {

template <typename Acc>
SoftmaxState<Acc>::SoftmaxState(int64_t value_dim)
    : m_(-std::numeric_limits<Acc>::infinity()), l_(0), u_(static_cast<std::size_t>(value_dim), Acc(0)) {}

template <typename Acc>
SoftmaxState<Acc> SoftmaxState<Acc>::of_sink(Acc logit, int64_t value_dim) {
  SoftmaxState state(value_dim);
  state.m_ = logit;
  state.l_ = Acc(1);
  return state;
}

template <typename Acc>
SoftmaxState<Acc> SoftmaxState<Acc>::of_result(std::span<const Acc> o, Acc lse) {
  SoftmaxState state(static_cast<int64_t>(o.size()));
  if (!(lse > -std::numeric_limits<Acc>::infinity())) return state;
  state.m_ = lse;
  state.l_ = Acc(1);
  std::copy(o.begin(), o.end(), state.u_.begin());
  return state;
}

template <typename Acc>
void SoftmaxState<Acc>::rescale(Acc new_max) {
  if (new_max == m_) return;
  // exp(-inf) = 0 would be right too, but an empty state has nothing to scale.
  const Acc factor = empty() ? Acc(0) : std::exp(m_ - new_max);
  l_ *= factor;
  for (Acc& x : u_) x *= factor;
  m_ = new_max;
}

template <typename Acc>
void SoftmaxState<Acc>::add_tile(std::span<const Acc> logits, std::span<const Acc> values) {
  if (logits.empty()) return;
  SoftmaxState tile(static_cast<int64_t>(u_.size()));
  tile.m_ = *std::max_element(logits.begin(), logits.end());
  const std::size_t dv = u_.size();
  for (std::size_t j = 0; j < logits.size(); ++j) {
    const Acc p = std::exp(logits[j] - tile.m_);
    tile.l_ += p;
    for (std::size_t d = 0; d < dv; ++d) tile.u_[d] += p * values[j * dv + d];
  }
  merge(tile);
}

template <typename Acc>
void SoftmaxState<Acc>::merge(const SoftmaxState& other) {
  if (other.empty()) return;
  const Acc new_max = std::max(m_, other.m_);
  rescale(new_max);
  const Acc factor = std::exp(other.m_ - new_max);
  l_ += factor * other.l_;
  for (std::size_t d = 0; d < u_.size(); ++d) u_[d] += factor * other.u_[d];
}

template <typename Acc>
typename SoftmaxState<Acc>::Result SoftmaxState<Acc>::finalize() const {
  Result result{std::vector<Acc>(u_.size(), Acc(0)), -std::numeric_limits<Acc>::infinity()};
  if (empty()) return result;  // no visible key: zeros and -inf, never 0/0
  for (std::size_t d = 0; d < u_.size(); ++d) result.o[d] = u_[d] / l_;
  result.lse = m_ + std::log(l_);
  return result;
}

template class SoftmaxState<float>;
template class SoftmaxState<double>;

namespace {

struct Tile {
  int64_t begin;
  int64_t end;
};

std::vector<Tile> cut_tiles(int64_t keys, const std::vector<int64_t>& sizes) {
  std::vector<Tile> tiles;
  for (int64_t begin = 0, t = 0; begin < keys; ++t) {
    const int64_t size = sizes[static_cast<std::size_t>(t) % sizes.size()];
    tiles.push_back({begin, std::min(keys, begin + size)});
    begin += size;
  }
  return tiles;
}

std::vector<std::size_t> visiting_order(const TilePlan& plan, std::size_t count, std::mt19937_64& rng) {
  if (!plan.permutation.empty()) {
    std::vector<std::size_t> sorted = plan.permutation;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::size_t> identity(count);
    std::iota(identity.begin(), identity.end(), std::size_t{0});
    if (sorted != identity) {
      throw InvalidArgument("tile permutation: got " + std::to_string(plan.permutation.size()) + " entries for " +
                            std::to_string(count) + " tiles; expected a permutation of 0.." + std::to_string(count) +
                            "-1");
    }
    return plan.permutation;
  }
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (plan.order == TileOrder::kDescending) std::reverse(order.begin(), order.end());
  if (plan.order == TileOrder::kShuffled) std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace

template <typename Acc>
ReferenceOutput tiled_forward(const AttentionProblem& p, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const TilePlan& plan, TiledStats* stats,
                              const ModifierTensors& modifiers) {
  validate(p);
  const ModifierValues mods(p, modifiers);
  if (plan.tile_sizes.empty() ||
      std::any_of(plan.tile_sizes.begin(), plan.tile_sizes.end(), [](int64_t s) { return s <= 0; })) {
    throw InvalidArgument("tile sizes: got an empty list or a size <= 0; expected positive key counts");
  }
  const int64_t out_batches = p.is_packed() ? 1 : p.batch;
  ReferenceOutput out;
  out.o.assign(static_cast<std::size_t>(out_batches * p.seqlen_q * p.heads_q * p.head_dim_v), 0.0);
  out.lse.assign(static_cast<std::size_t>(out_batches * p.heads_q * p.seqlen_q),
                 -std::numeric_limits<double>::infinity());
  const auto scale = static_cast<Acc>(p.softmax_scale());
  const auto load = [&](const std::uint16_t* t, int64_t offset) {
    return static_cast<Acc>(bits_to_float(p.dtype, t[offset]));
  };
  std::mt19937_64 rng(plan.seed);
  std::vector<Acc> logits;
  std::vector<Acc> values;
  TiledStats local;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent seq = p.sequence(b);
    // Tiles cover the whole key axis, padding included, as a kernel's do;
    // those the mask or the padding hide entirely are skipped below.
    const std::vector<Tile> tiles = cut_tiles(seq.k_capacity, plan.tile_sizes);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = p.kv_head_of(h);
      for (int64_t i = 0; i < seq.q_len; ++i) {
        const int64_t row = seq.q_begin + i;
        const KeyRange visible = visible_keys(p.mask, i, seq.q_len, seq.k_len);
        const int64_t q_off = element_offset(p.q_strides, b, row, h);
        SoftmaxState<Acc> state(p.head_dim_v);
        for (std::size_t t : visiting_order(plan, tiles.size(), rng)) {
          // Keys of this tile that the mask leaves visible, by global position.
          const int64_t begin = std::max(tiles[t].begin, visible.begin);
          const int64_t end = std::min(tiles[t].end, visible.end);
          if (begin >= end) {
            ++local.tiles_skipped;
            continue;
          }
          ++local.tiles_visited;
          logits.clear();
          values.clear();
          for (int64_t j = begin; j < end; ++j) {
            const int64_t k_off = element_offset(p.k_strides, b, seq.k_begin + j, hk);
            Acc dot = 0;
            for (int64_t d = 0; d < p.head_dim_k; ++d) dot += load(q, q_off + d) * load(k, k_off + d);
            logits.push_back(static_cast<Acc>(mods.cap(scale * dot) + mods.bias(b, h, i, j, seq)));
            // Dropout scales P_ij, not the softmax's mass: the weight rides on
            // v_j, so u sums P_ij w_ij v_j while l sums the P_ij.
            const auto weight = static_cast<Acc>(mods.dropout_weight(b, h, i, j));
            const int64_t v_off = element_offset(p.v_strides, b, seq.k_begin + j, hk);
            for (int64_t d = 0; d < p.head_dim_v; ++d) values.push_back(weight * load(v, v_off + d));
          }
          state.add_tile(logits, values);
        }
        if (mods.has_sinks()) state.merge(SoftmaxState<Acc>::of_sink(static_cast<Acc>(mods.sink(h)), p.head_dim_v));
        const auto result = state.finalize();
        const auto o_index = static_cast<std::size_t>(reference_o_index(p, b, row, h));
        std::copy(result.o.begin(), result.o.end(), out.o.begin() + static_cast<std::ptrdiff_t>(o_index));
        out.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))] = result.lse;
      }
    }
  }
  if (stats != nullptr) *stats = local;
  return out;
}

template ReferenceOutput tiled_forward<float>(const AttentionProblem&, const std::uint16_t*, const std::uint16_t*,
                                              const std::uint16_t*, const TilePlan&, TiledStats*,
                                              const ModifierTensors&);
template ReferenceOutput tiled_forward<double>(const AttentionProblem&, const std::uint16_t*, const std::uint16_t*,
                                               const std::uint16_t*, const TilePlan&, TiledStats*,
                                               const ModifierTensors&);

}  // namespace attune
