// Host implementation of the tiled online softmax with the mergeable state
// (m, l, u): the algorithm every kernel implements, written plainly so that
// its properties (any tiling, any order, empty tiles) can be tested on a CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/problem.h"
#include "reference/reference.h"

namespace attune {

// Partial softmax state of one query row over a subset of its keys:
//   m = max logit, l = sum exp(s_j - m), u = sum exp(s_j - m) * v_j.
// Two states over disjoint key sets merge into the state of their union.
template <typename Acc>
class SoftmaxState {
 public:
  explicit SoftmaxState(int64_t value_dim);
  // The state of an attention sink: one logit with no value (m = logit,
  // l = 1, u = 0), merged like any other key set.
  static SoftmaxState of_sink(Acc logit, int64_t value_dim);
  // The state of a finished partial result (O, LSE): m = lse, l = 1, u = o;
  // LSE = -inf is an empty state (a partial over no keys).
  static SoftmaxState of_result(std::span<const Acc> o, Acc lse);

  // Folds in one tile: `logits` (already scaled), `values` row-major
  // [logits.size(), value_dim]. An empty tile changes nothing.
  void add_tile(std::span<const Acc> logits, std::span<const Acc> values);
  // Folds in the state of a disjoint key set. Both l and u are rescaled to
  // the common maximum; an empty state is skipped explicitly (its m is -inf).
  void merge(const SoftmaxState& other);

  struct Result {
    std::vector<Acc> o;  // u / l, or zeros when empty
    Acc lse;             // m + log(l), or -inf when empty
  };
  Result finalize() const;

  bool empty() const { return l_ == Acc(0); }
  Acc m() const { return m_; }
  Acc l() const { return l_; }
  std::span<const Acc> u() const { return u_; }

 private:
  void rescale(Acc new_max);  // l, u *= exp(m - new_max); m = new_max

  Acc m_;
  Acc l_;
  std::vector<Acc> u_;
};

enum class TileOrder : std::uint8_t { kAscending, kDescending, kShuffled };

// How tiled_forward cuts and visits each row's key axis.
struct TilePlan {
  std::vector<int64_t> tile_sizes = {64};  // cycled over the key axis; each > 0
  TileOrder order = TileOrder::kAscending;
  std::uint64_t seed = 0;                // for kShuffled
  std::vector<std::size_t> permutation;  // explicit order; overrides `order`
};

struct TiledStats {
  int64_t tiles_visited = 0;
  int64_t tiles_skipped = 0;  // entirely masked: never touched
};

// Forward attention by tiles of keys with the online softmax, accumulating
// in Acc (float, as the kernels do, or double). Output layout as the
// reference's. Score modifiers as in reference_forward: softcap and ALiBi on
// each logit (evaluated in fp64, then rounded to Acc), the sink merged as one
// more state after the last tile; dropout's weight w_ij (0 or 1 / (1 - p),
// from the element's global position, whatever the tiles) multiplies v_j in
// u, never l, so LSE is the one without dropout. Throws InvalidArgument for a
// bad plan or bad modifier values.
template <typename Acc>
ReferenceOutput tiled_forward(const AttentionProblem& problem, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const TilePlan& plan, TiledStats* stats = nullptr,
                              const ModifierTensors& modifiers = {});

extern template class SoftmaxState<float>;
extern template class SoftmaxState<double>;

}  // namespace attune
