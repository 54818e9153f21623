// The combine step of split-KV decode on its own: flash_decode_combine on
// the emulator merges per-split states (u, m, l) built on the host from a
// random partition of each row's keys into splits (any subsets, any order,
// empty splits with m = -inf and l = 0, rows whose every split is empty).
// The result must equal the unsplit attention of the row within rounding.
// A wrong combine that rescales only the normalizer is kept here and must be
// caught by the same check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "emulator/emulator.h"
#include "runtime/launch/flash_decode_params.h"

namespace attune {
namespace {

constexpr int kRows = 3000;
constexpr int kDv = 8;
constexpr int kMaxSplits = 9;
constexpr int kMaxKeys = 40;

// One row: its keys' logits (base 2) and values, and the split of each key.
struct Row {
  std::vector<double> logits;
  std::vector<std::vector<double>> values;
  std::vector<int> split;
};

struct Expected {
  std::vector<double> o;  // [kRows][kDv]
  std::vector<double> lse;
};

std::vector<Row> random_rows(int splits, std::mt19937& rng) {
  std::uniform_int_distribution<int> key_count(0, kMaxKeys);
  std::uniform_int_distribution<int> which(0, splits - 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> spread(0.1, 30.0);  // wide spans make a wrong rescale visible
  std::vector<Row> rows(kRows);
  for (int r = 0; r < kRows; ++r) {
    Row& row = rows[static_cast<std::size_t>(r)];
    // Every 10th row has no key at all: every split empty.
    const int n = r % 10 == 0 ? 0 : key_count(rng);
    const double width = spread(rng);
    const int favourite = which(rng);  // some splits get nothing: empty splits
    for (int j = 0; j < n; ++j) {
      row.logits.push_back(width * normal(rng));
      std::vector<double> v(kDv);
      for (double& x : v) x = normal(rng);
      row.values.push_back(v);
      row.split.push_back(j % 3 == 0 ? favourite : which(rng));
    }
  }
  return rows;
}

Expected unsplit(const std::vector<Row>& rows) {
  Expected e{std::vector<double>(static_cast<std::size_t>(kRows) * kDv, 0.0),
             std::vector<double>(kRows, -std::numeric_limits<double>::infinity())};
  for (int r = 0; r < kRows; ++r) {
    const Row& row = rows[static_cast<std::size_t>(r)];
    if (row.logits.empty()) continue;
    const double m = *std::max_element(row.logits.begin(), row.logits.end());
    double l = 0;
    std::vector<double> u(kDv, 0.0);
    for (std::size_t j = 0; j < row.logits.size(); ++j) {
      const double p = std::exp2(row.logits[j] - m);
      l += p;
      for (int d = 0; d < kDv; ++d) u[static_cast<std::size_t>(d)] += p * row.values[j][static_cast<std::size_t>(d)];
    }
    for (int d = 0; d < kDv; ++d) e.o[static_cast<std::size_t>(r * kDv + d)] = u[static_cast<std::size_t>(d)] / l;
    e.lse[static_cast<std::size_t>(r)] = (m + std::log2(l)) * std::log(2.0);
  }
  return e;
}

// The workspace flash_decode writes: [splits][rows][Dv + 2] of (u, m, l),
// each split's state of its own keys relative to its own maximum.
std::vector<float> split_states(const std::vector<Row>& rows, int splits) {
  constexpr int kStride = kDv + 2;
  std::vector<float> w(static_cast<std::size_t>(splits) * kRows * kStride, 0.0F);
  for (int s = 0; s < splits; ++s) {
    for (int r = 0; r < kRows; ++r) {
      const Row& row = rows[static_cast<std::size_t>(r)];
      float* state = &w[(static_cast<std::size_t>(s) * kRows + static_cast<std::size_t>(r)) * kStride];
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < row.logits.size(); ++j) {
        if (row.split[j] == s) m = std::max(m, row.logits[j]);
      }
      double l = 0;
      std::vector<double> u(kDv, 0.0);
      for (std::size_t j = 0; j < row.logits.size(); ++j) {
        if (row.split[j] != s) continue;
        const double p = std::exp2(row.logits[j] - m);
        l += p;
        for (int d = 0; d < kDv; ++d) u[static_cast<std::size_t>(d)] += p * row.values[j][static_cast<std::size_t>(d)];
      }
      for (int d = 0; d < kDv; ++d) state[d] = static_cast<float>(u[static_cast<std::size_t>(d)]);
      state[kDv] = static_cast<float>(m);
      state[kDv + 1] = static_cast<float>(l);
    }
  }
  return w;
}

struct Combined {
  std::vector<double> o;
  std::vector<double> lse;
};

// A problem whose B x Hq x Sq output rows are the test's rows.
AttentionProblem rows_problem() {
  return make_problem(std::vector<int64_t>{1, kRows, 1, kDv}, std::vector<int64_t>{1, 1, 1, kDv},
                      std::vector<int64_t>{1, 1, 1, kDv}, {.dtype = DType::kF16});
}

Combined combine_on_emulator(std::vector<float>& workspace, int splits) {
  const AttentionProblem p = rows_problem();
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  emu::Emulator emulator;
  emulator.register_buffer("split workspace", workspace.data(), workspace.size() * sizeof(float));
  emulator.register_buffer("O", o.data(), o.size() * 2);
  emulator.register_buffer("LSE", lse.data(), lse.size() * sizeof(float));
  const FlashDecodeCombineParams params =
      flash_decode_combine_params(p, {nullptr, nullptr, nullptr, o.data(), lse.data()}, {}, splits, workspace.data());
  const Variant& combine = decode_combine_variant();
  if (!combine.kernel->launch_on_emulator(p.dtype, combine.values, emulator, flash_decode_combine_launch(p), &params)) {
    throw Error("flash_decode_combine is not instantiated for the emulator");
  }
  Combined c;
  for (std::uint16_t bits : o) c.o.push_back(bits_to_float(p.dtype, bits));
  c.lse.assign(lse.begin(), lse.end());
  return c;
}

// The combine that rescales only the normalizer: kept to show the check
// catches it.
Combined combine_rescaling_only_l(const std::vector<float>& w, int splits) {
  constexpr int kStride = kDv + 2;
  Combined c{std::vector<double>(static_cast<std::size_t>(kRows) * kDv, 0.0), std::vector<double>(kRows)};
  for (int r = 0; r < kRows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int s = 0; s < splits; ++s) {
      const float* st = &w[(static_cast<std::size_t>(s) * kRows + static_cast<std::size_t>(r)) * kStride];
      if (st[kDv + 1] > 0) m = std::max(m, static_cast<double>(st[kDv]));
    }
    double l = 0;
    std::vector<double> u(kDv, 0.0);
    for (int s = 0; s < splits; ++s) {
      const float* st = &w[(static_cast<std::size_t>(s) * kRows + static_cast<std::size_t>(r)) * kStride];
      if (st[kDv + 1] <= 0) continue;
      l += std::exp2(st[kDv] - m) * st[kDv + 1];
      for (int d = 0; d < kDv; ++d) u[static_cast<std::size_t>(d)] += st[d];  // the bug: u not rescaled
    }
    for (int d = 0; d < kDv; ++d) {
      c.o[static_cast<std::size_t>(r * kDv + d)] = l > 0 ? u[static_cast<std::size_t>(d)] / l : 0.0;
    }
    c.lse[static_cast<std::size_t>(r)] =
        l > 0 ? (m + std::log2(l)) * std::log(2.0) : -std::numeric_limits<double>::infinity();
  }
  return c;
}

// Rows that break the rule "equal to the unsplit result within rounding": O
// within fp16 rounding of the output plus float accumulation, LSE within
// float rounding; rows without keys exactly O = 0 and LSE = -inf.
int wrong_rows(const Combined& got, const Expected& want) {
  int wrong = 0;
  for (int r = 0; r < kRows; ++r) {
    bool ok = true;
    const double lse = want.lse[static_cast<std::size_t>(r)];
    if (std::isinf(lse)) {
      ok = std::isinf(got.lse[static_cast<std::size_t>(r)]) && got.lse[static_cast<std::size_t>(r)] < 0;
      for (int d = 0; d < kDv; ++d) ok = ok && got.o[static_cast<std::size_t>(r * kDv + d)] == 0.0;
    } else {
      ok = std::abs(got.lse[static_cast<std::size_t>(r)] - lse) <= 1e-5 * std::max(1.0, std::abs(lse));
      for (int d = 0; d < kDv; ++d) {
        const double x = want.o[static_cast<std::size_t>(r * kDv + d)];
        ok = ok && std::abs(got.o[static_cast<std::size_t>(r * kDv + d)] - x) <= 1e-3 * std::max(1.0, std::abs(x));
      }
    }
    wrong += ok ? 0 : 1;
  }
  return wrong;
}

TEST(FlashDecodeCombineTest, AnyPartitionOfTheKeysEqualsTheUnsplitResult) {
  std::mt19937 rng(2024);
  for (int splits = 1; splits <= kMaxSplits; ++splits) {
    const std::vector<Row> rows = random_rows(splits, rng);
    const Expected want = unsplit(rows);
    std::vector<float> workspace = split_states(rows, splits);
    EXPECT_EQ(wrong_rows(combine_on_emulator(workspace, splits), want), 0) << splits << " splits";
  }
}

TEST(FlashDecodeCombineTest, RescalingOnlyTheNormalizerIsCaught) {
  std::mt19937 rng(7);
  for (int splits = 2; splits <= kMaxSplits; ++splits) {
    const std::vector<Row> rows = random_rows(splits, rng);
    const std::vector<float> workspace = split_states(rows, splits);
    // Most rows with keys in two or more splits go wrong.
    EXPECT_GT(wrong_rows(combine_rescaling_only_l(workspace, splits), unsplit(rows)), kRows / 2) << splits;
  }
}

}  // namespace
}  // namespace attune
