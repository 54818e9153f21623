// The tiled online softmax: the counterexamples that make it necessary (with
// the wrong algorithms kept here to prove the checks can fail), and the tiled
// computation against the fp64 reference for any tiling and visiting order,
// with score modifiers and dropout.
#include "reference/online_softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "tests/support/families.h"

namespace attune {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kLn3 = std::log(3.0);

// One key per tile, logits (0, ln 3): softmax weights are 1/4 and 3/4.
struct TwoTiles {
  std::vector<double> logits = {0.0, kLn3};
  std::vector<double> values;
};

double online(const TwoTiles& t) {
  SoftmaxState<double> state(1);
  for (std::size_t j = 0; j < t.logits.size(); ++j) {
    state.add_tile(std::span(&t.logits[j], 1), std::span(&t.values[j], 1));
  }
  return state.finalize().o[0];
}

// Wrong: normalize each tile on its own, then add the tile outputs.
double per_tile_normalized_sum(const TwoTiles& t) {
  double o = 0;
  for (std::size_t j = 0; j < t.logits.size(); ++j) o += t.values[j];  // each tile's softmax is 1
  return o;
}

// Wrong: normalize each tile on its own, then average the tile outputs.
double per_tile_normalized_mean(const TwoTiles& t) {
  return per_tile_normalized_sum(t) / static_cast<double>(t.logits.size());
}

// Wrong: when the maximum moves, rescale l but forget u.
double rescale_l_only(const TwoTiles& t) {
  double m = -kInf;
  double l = 0;
  double u = 0;
  for (std::size_t j = 0; j < t.logits.size(); ++j) {
    const double new_m = std::max(m, t.logits[j]);
    l = l * std::exp(m - new_m) + std::exp(t.logits[j] - new_m);
    u = u + std::exp(t.logits[j] - new_m) * t.values[j];
    m = new_m;
  }
  return u / l;
}

TEST(OnlineSoftmaxTest, CounterexamplesSeparateRightFromWrong) {
  const TwoTiles rising{.values = {0.0, 1.0}};
  EXPECT_NEAR(online(rising), 0.75, 1e-15);
  EXPECT_NEAR(per_tile_normalized_sum(rising), 1.0, 1e-15);
  EXPECT_NEAR(per_tile_normalized_mean(rising), 0.5, 1e-15);

  const TwoTiles falling{.values = {1.0, 0.0}};
  EXPECT_NEAR(online(falling), 0.25, 1e-15);
  EXPECT_NEAR(rescale_l_only(falling), 0.75, 1e-15);
}

TEST(OnlineSoftmaxTest, MergeRescalesBothNormalizerAndSum) {
  SoftmaxState<double> a(1);
  SoftmaxState<double> b(1);
  const double one = 1.0;
  const double zero = 0.0;
  a.add_tile(std::span(&zero, 1), std::span(&one, 1));   // logit 0, value 1
  b.add_tile(std::span(&kLn3, 1), std::span(&zero, 1));  // logit ln 3, value 0
  SoftmaxState<double> ab = a;
  ab.merge(b);
  SoftmaxState<double> ba = b;
  ba.merge(a);
  EXPECT_NEAR(ab.finalize().o[0], 0.25, 1e-15);
  EXPECT_NEAR(ba.finalize().o[0], 0.25, 1e-15);
  EXPECT_NEAR(ab.finalize().lse, std::log(4.0), 1e-15);
  EXPECT_DOUBLE_EQ(ab.m(), kLn3);
  EXPECT_NEAR(ab.l(), 4.0 / 3.0, 1e-15);
}

TEST(OnlineSoftmaxTest, EmptyStatesAreSkipped) {
  SoftmaxState<float> empty(2);
  EXPECT_TRUE(empty.empty());
  const auto result = empty.finalize();
  EXPECT_EQ(result.o, (std::vector<float>{0.0F, 0.0F}));
  EXPECT_EQ(result.lse, -std::numeric_limits<float>::infinity());

  SoftmaxState<float> state(2);
  const float logit = 3.0F;
  const float value[] = {1.0F, -2.0F};
  state.add_tile(std::span(&logit, 1), value);
  state.merge(empty);  // exp(-inf - m) * 0 would be fine; -inf - -inf would not
  state.add_tile({}, {});
  EXPECT_EQ(state.finalize().o, (std::vector<float>{1.0F, -2.0F}));
  SoftmaxState<float> from_empty(2);
  from_empty.merge(state);
  EXPECT_EQ(from_empty.finalize().o, (std::vector<float>{1.0F, -2.0F}));
  EXPECT_FLOAT_EQ(from_empty.finalize().lse, 3.0F);
}

// Largest error relative to (1 + |want|); -inf must match exactly, NaN never.
double max_error(const ReferenceOutput& got, const ReferenceOutput& want) {
  double worst = 0;
  const auto visit = [&](const std::vector<double>& g, const std::vector<double>& w) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(g[i])) return kInf;
      if (std::isinf(w[i]) || std::isinf(g[i])) {
        if (g[i] != w[i]) return kInf;
        continue;
      }
      worst = std::max(worst, std::abs(g[i] - w[i]) / (1 + std::abs(w[i])));
    }
    return worst;
  };
  visit(got.o, want.o);
  return visit(got.lse, want.lse);
}

TEST(OnlineSoftmaxTest, AnyTilingAndOrderMatchesReference) {
  const std::vector<TilePlan> plans = {
      {.tile_sizes = {1}},
      {.tile_sizes = {3}, .order = TileOrder::kDescending},
      {.tile_sizes = {2, 5, 1}, .order = TileOrder::kShuffled, .seed = 3},
      {.tile_sizes = {4}, .order = TileOrder::kShuffled, .seed = 11},
      {.tile_sizes = {64}},
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const testing::Family& family : testing::seed_families(dtype)) {
      const testing::Inputs in = testing::make_inputs(family);
      const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const auto f32 = tiled_forward<float>(in.problem, in.q.data(), in.k.data(), in.v.data(), plans[i]);
        const auto f64 = tiled_forward<double>(in.problem, in.q.data(), in.k.data(), in.v.data(), plans[i]);
        // fp32 accumulation: a few ulps per operation; an absolute logit
        // error of eps * |logit| moves the weights by as much.
        EXPECT_LT(max_error(f32, want), 4e-6 * (1 + testing::max_abs_logit(in))) << family.name << " plan " << i;
        EXPECT_LT(max_error(f64, want), 1e-12) << family.name << " plan " << i;
      }
    }
  }
}

TEST(OnlineSoftmaxTest, AllSixOrdersOfThreeTiles) {
  testing::Family family = testing::seed_families()[0];  // Sq 5, Sk 9
  const testing::Inputs in = testing::make_inputs(family);
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  std::vector<std::size_t> order = {0, 1, 2};
  int orders = 0;
  do {
    const TilePlan plan{.tile_sizes = {2, 4, 3}, .permutation = order};
    const auto got = tiled_forward<double>(in.problem, in.q.data(), in.k.data(), in.v.data(), plan);
    EXPECT_LT(max_error(got, want), 1e-12) << order[0] << order[1] << order[2];
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 6);
  // A permutation that does not fit the tiles is an error, not a silent skip.
  EXPECT_THROW(tiled_forward<double>(in.problem, in.q.data(), in.k.data(), in.v.data(),
                                     TilePlan{.tile_sizes = {3}, .permutation = {0, 1}}),
               InvalidArgument);
}

TEST(OnlineSoftmaxTest, EntirelyMaskedTilesAreSkipped) {
  // Padding over Sk = 10 keys in tiles of 2: batch 1 has 3 keys and batch 2
  // none, so the tiles past them are never touched, and the rows of batch 2
  // come out as 0 and -inf.
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[6]);
  TiledStats stats;
  const auto got =
      tiled_forward<float>(in.problem, in.q.data(), in.k.data(), in.v.data(), TilePlan{.tile_sizes = {2}}, &stats);
  // Per row: batch 0 visits 5 tiles; batch 1 visits 2, skips 3; batch 2 skips 5.
  const int64_t rows = in.problem.seqlen_q * in.problem.heads_q;
  EXPECT_EQ(stats.tiles_visited, rows * (5 + 2));
  EXPECT_EQ(stats.tiles_skipped, rows * (3 + 5));
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  EXPECT_LT(max_error(got, want), 2e-5);
  for (int64_t i = 0; i < rows; ++i) {
    EXPECT_EQ(got.lse[static_cast<std::size_t>(2 * rows + i)], -kInf);
  }
}

// The wrong algorithm run through the same check on real families: the
// check must report it.
TEST(OnlineSoftmaxTest, CheckCatchesPerTileNormalization) {
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[0]);
  const AttentionProblem& p = in.problem;
  ReferenceOutput wrong = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
  // Recompute O as the mean of per-tile softmax outputs over tiles of 3 keys.
  for (int64_t i = 0; i < p.seqlen_q; ++i) {
    for (int64_t d = 0; d < p.head_dim_v; ++d) wrong.o[static_cast<std::size_t>(i * p.head_dim_v + d)] = 0;
    for (int64_t t = 0; t < 3; ++t) {
      SoftmaxState<double> tile(p.head_dim_v);
      std::vector<double> logits;
      std::vector<double> values;
      for (int64_t j = 3 * t; j < 3 * t + 3; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim_k; ++d)
          dot += bits_to_float(p.dtype, in.q[static_cast<std::size_t>(i * p.head_dim_k + d)]) *
                 bits_to_float(p.dtype, in.k[static_cast<std::size_t>(j * p.head_dim_k + d)]);
        logits.push_back(p.softmax_scale() * dot);
        for (int64_t d = 0; d < p.head_dim_v; ++d)
          values.push_back(bits_to_float(p.dtype, in.v[static_cast<std::size_t>(j * p.head_dim_v + d)]));
      }
      tile.add_tile(logits, values);
      const auto r = tile.finalize();
      for (int64_t d = 0; d < p.head_dim_v; ++d) wrong.o[static_cast<std::size_t>(i * p.head_dim_v + d)] += r.o[d] / 3;
    }
  }
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
  EXPECT_GT(max_error(wrong, want), 1e-3);
}

TEST(OnlineSoftmaxTest, SinkIsOneMoreStateWithNoValue) {
  // One key (logit 0, value 1) and a sink of logit ln 3: weights 1/4 and 3/4.
  SoftmaxState<double> state(1);
  const double zero = 0.0;
  const double one = 1.0;
  state.add_tile(std::span(&zero, 1), std::span(&one, 1));
  const SoftmaxState<double> sink = SoftmaxState<double>::of_sink(kLn3, 1);
  EXPECT_EQ(sink.m(), kLn3);
  EXPECT_EQ(sink.l(), 1.0);
  EXPECT_EQ(sink.u()[0], 0.0);
  state.merge(sink);
  EXPECT_NEAR(state.finalize().o[0], 0.25, 1e-15);
  EXPECT_NEAR(state.finalize().lse, std::log(4.0), 1e-15);
  // A row with no key: O = 0, LSE = the sink.
  SoftmaxState<double> empty(1);
  empty.merge(sink);
  EXPECT_EQ(empty.finalize().o[0], 0.0);
  EXPECT_EQ(empty.finalize().lse, kLn3);
}

TEST(OnlineSoftmaxTest, ModifiersMatchReferenceForAnyTiling) {
  const std::vector<TilePlan> plans = {
      {.tile_sizes = {1}},
      {.tile_sizes = {2, 5, 1}, .order = TileOrder::kShuffled, .seed = 3},
      {.tile_sizes = {64}},
  };
  double moved = 0;  // how far the modifiers move the outputs: the check is not vacuous
  for (const testing::Family& family : testing::seed_families()) {
    testing::Inputs in = testing::make_inputs(family);
    AttentionProblem& p = in.problem;
    const ReferenceOutput plain = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
    p.modifiers = {.softcap = 3.0, .sinks = true, .alibi = AlibiSlopes::kPerBatchHead};
    std::vector<float> sinks, slopes;
    for (int64_t h = 0; h < p.heads_q; ++h) sinks.push_back(0.5F * static_cast<float>(h) - 0.25F);
    for (int64_t e = 0; e < alibi_extent(p); ++e) slopes.push_back(0.1F + 0.05F * static_cast<float>(e % 7));
    const ModifierTensors mods{.sinks = sinks.data(), .alibi_slopes = slopes.data()};
    const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), mods);
    moved = std::max(moved, max_error(plain, want));
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const auto f32 =
          tiled_forward<float>(p, in.q.data(), in.k.data(), in.v.data(), plans[i], /*stats=*/nullptr, mods);
      const auto f64 =
          tiled_forward<double>(p, in.q.data(), in.k.data(), in.v.data(), plans[i], /*stats=*/nullptr, mods);
      EXPECT_LT(max_error(f32, want), 4e-6 * (1 + testing::max_abs_logit(in))) << family.name << " plan " << i;
      EXPECT_LT(max_error(f64, want), 1e-12) << family.name << " plan " << i;
    }
  }
  EXPECT_GT(moved, 1e-2);
  // Missing values are refused here too.
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[0]);
  AttentionProblem p = in.problem;
  p.modifiers.sinks = true;
  EXPECT_THROW(tiled_forward<double>(p, in.q.data(), in.k.data(), in.v.data(), TilePlan{}), InvalidArgument);
}

// Dropout's mask is a function of global positions: every tiling and order
// drops the same elements as the reference, and LSE stays the one without
// dropout.
TEST(OnlineSoftmaxTest, DropoutMatchesReferenceForAnyTiling) {
  const std::vector<TilePlan> plans = {
      {.tile_sizes = {1}},
      {.tile_sizes = {3, 8, 1}, .order = TileOrder::kShuffled, .seed = 5},
      {.tile_sizes = {16}, .order = TileOrder::kDescending},
  };
  double moved = 0;
  for (const testing::Family& family : testing::seed_families()) {
    testing::Inputs in = testing::make_inputs(family);
    AttentionProblem& p = in.problem;
    const ReferenceOutput plain = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
    p.modifiers = {.dropout_p = 0.3, .seed = 0xABCDEF0123456789ull, .offset = 42};
    const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data());
    moved = std::max(moved, max_error(plain, want));
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const auto f32 = tiled_forward<float>(p, in.q.data(), in.k.data(), in.v.data(), plans[i]);
      const auto f64 = tiled_forward<double>(p, in.q.data(), in.k.data(), in.v.data(), plans[i]);
      EXPECT_LT(max_error(f32, want), 4e-6 * (1 + testing::max_abs_logit(in))) << family.name << " plan " << i;
      EXPECT_LT(max_error(f64, want), 1e-12) << family.name << " plan " << i;
      ReferenceOutput lse_only = f64;
      lse_only.o = plain.o;
      EXPECT_LT(max_error(lse_only, plain), 1e-12) << family.name << " plan " << i;
    }
  }
  EXPECT_GT(moved, 1e-2);
}

}  // namespace
}  // namespace attune
