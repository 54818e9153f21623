// The dropout keep decision (templates/dropout.h) on the host: Philox-4x32-10
// against Random123's published known answers, the kept fraction within
// binomial bounds (overall and per word of a Philox group), and a mask that
// changes with the offset, the seed, the head and the batch, but not between
// two calls with the same ones.
#include "templates/dropout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace attune {
namespace {

// Random123's tests/kat_vectors (DEShawResearch/random123), the
// "philox4x32 10" lines: counter (4 words), key (2 words), result (4 words).
struct KnownAnswer {
  std::string name;
  philox::U32x4 counter;
  u32 key[2];
  philox::U32x4 result;
};

const KnownAnswer kKnownAnswers[] = {
    {"zeros", {{0, 0, 0, 0}}, {0, 0}, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
    {"ones",
     {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
     {0xffffffffu, 0xffffffffu},
     {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
    {"pi_digits",
     {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
     {0xa4093822u, 0x299f31d0u},
     {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
};

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    const philox::U32x4 got = philox::philox4x32_10(kat.counter, kat.key[0], kat.key[1]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(got.x[w], kat.result.x[w]) << kat.name << " word " << w;
  }
}

TEST(DropoutParamsTest, KeepBelowIsTheFloorOfTheKeptFractionOfTwoTo32) {
  for (const double p : {0.0, 1e-12, 0.1, 0.17, 0.25, 0.5, 0.9, 0.999, 1.0 - 1e-12}) {
    const DropoutParams d = dropout_params(p, 7, 9);
    const double want = std::min(std::floor((1.0 - p) * 4294967296.0), 4294967295.0);
    EXPECT_EQ(static_cast<double>(d.keep_below), want) << "p " << p;
    EXPECT_EQ(d.keep_scale, static_cast<float>(1.0 / (1.0 - p))) << "p " << p;
    EXPECT_EQ(d.seed, 7U);
    EXPECT_EQ(d.offset, 9U);
    EXPECT_EQ(d.state, nullptr);
  }
  EXPECT_EQ(dropout_params(0.5, 0, 0).keep_below, 0x80000000u);
  EXPECT_EQ(dropout_params(0.75, 0, 0).keep_below, 0x40000000u);
  EXPECT_EQ(dropout_params(0.0, 0, 0).keep_below, 0xFFFFFFFFu);  // 2^32 does not fit: p = 0 is "off" upstream
}

// The region the statistics run over: B 2, Hq 4, 512 rows x 512 keys per head.
constexpr int64_t kBatch = 2;
constexpr int64_t kHeads = 4;
constexpr int64_t kRows = 512;
constexpr int64_t kKeys = 512;

template <typename Visit>
void for_each_element(Visit visit) {
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kRows; ++i)
        for (int64_t j = 0; j < kKeys; ++j) visit(b, h, i, j);
}

// 5 standard deviations of the fraction of n Bernoulli(q) draws.
double five_sigma(double q, double n) { return 5 * std::sqrt(q * (1 - q) / n); }

// Kept elements over the region, in total and by the Philox word they come
// from (DropoutStream::word_of).
struct KeptCounts {
  int64_t kept = 0;
  int64_t kept_by_word[4] = {};
  int64_t total_by_word[4] = {};
};

KeptCounts count_kept(const DropoutParams& d) {
  KeptCounts c;
  for_each_element([&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const int w = DropoutStream::word_of(i, j);
    const bool kept = dropout_keeps(d, b, h, kHeads, i, j);
    c.kept += kept;
    c.kept_by_word[w] += kept;
    ++c.total_by_word[w];
  });
  return c;
}

TEST(DropoutKeepsTest, KeptFractionIsWithinBinomialBounds) {
  const double n = kBatch * kHeads * kRows * kKeys;
  for (const double p : {0.1, 0.5, 0.9}) {
    const DropoutParams d = dropout_params(p, 0x243F6A8885A308D3ull, 0x13198A2E03707344ull);
    const KeptCounts c = count_kept(d);
    EXPECT_NEAR(static_cast<double>(c.kept) / n, 1 - p, five_sigma(1 - p, n)) << "p " << p;
    // No word of a group is biased: each carries a quarter of the elements
    // and keeps them at the same rate.
    for (int w = 0; w < 4; ++w) {
      ASSERT_EQ(static_cast<double>(c.total_by_word[w]), n / 4) << "word " << w;
      EXPECT_NEAR(static_cast<double>(c.kept_by_word[w]) / (n / 4), 1 - p, five_sigma(1 - p, n / 4))
          << "p " << p << " word " << w;
    }
  }
}

// The fraction of the region where two masks agree: near p^2 + (1 - p)^2
// for independent ones, 1 for the same.
template <typename Other>
double agreement(const DropoutParams& d, Other other) {
  int64_t same = 0;
  int64_t n = 0;
  for_each_element([&](int64_t b, int64_t h, int64_t i, int64_t j) {
    same += dropout_keeps(d, b, h, kHeads, i, j) == other(b, h, i, j);
    ++n;
  });
  return static_cast<double>(same) / static_cast<double>(n);
}

TEST(DropoutKeepsTest, SameSeedAndOffsetGiveTheSameMask) {
  const DropoutParams d = dropout_params(0.3, 42, 1000);
  const DropoutParams again = dropout_params(0.3, 42, 1000);
  EXPECT_EQ(agreement(d, [&](int64_t b, int64_t h, int64_t i,
                             int64_t j) { return dropout_keeps(again, b, h, kHeads, i, j); }),
            1.0);
}

TEST(DropoutKeepsTest, OffsetSeedHeadAndBatchEachChangeTheMask) {
  const double n = kBatch * kHeads * kRows * kKeys;
  for (const double p : {0.1, 0.5, 0.9}) {
    const double independent = p * p + (1 - p) * (1 - p);
    // Agreement of two independent masks is a mean of n Bernoulli(independent).
    const double bound = five_sigma(independent, n);
    const u64 seed = 0x0123456789ABCDEFull;
    const u64 offset = 0x0000000500000010ull;
    const DropoutParams d = dropout_params(p, seed, offset);
    struct Other {
      std::string name;
      DropoutParams params;
      int64_t batch_shift;  // compares element (b, h) with (b ^ batch_shift, h ^ head_shift)
      int64_t head_shift;
    };
    const std::vector<Other> others = {
        {"offset + 1", dropout_params(p, seed, offset + 1), 0, 0},
        {"offset + 2^32 (high word)", dropout_params(p, seed, offset + (1ull << 32)), 0, 0},
        {"seed + 1", dropout_params(p, seed + 1, offset), 0, 0},
        {"seed + 2^32 (high word)", dropout_params(p, seed + (1ull << 32), offset), 0, 0},
        {"another head", d, 0, 1},
        {"another batch", d, 1, 0},
    };
    for (const Other& o : others) {
      const double agree = agreement(d, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
        return dropout_keeps(o.params, b ^ o.batch_shift, h ^ o.head_shift, kHeads, i, j);
      });
      EXPECT_NEAR(agree, independent, bound) << "p " << p << ", " << o.name;
    }
  }
}

// Rows and keys map to groups and words by global position: (i, i + 8) x
// (j, j + 1) share one group for i mod 16 < 8 and even j, and nothing else
// does; so row i + 16 or key j + 2 is another group.
TEST(DropoutKeepsTest, GroupsAreTheFourElementsOfAnAccumulatorFragment) {
  const DropoutParams d = dropout_params(0.5, 3, 4);
  for (const int64_t i : {0, 5, 7, 16, 23, 100}) {
    for (const int64_t j : {0, 6, 130}) {
      const int64_t base_row = (i / 16) * 16 + i % 8;
      const DropoutStream stream = DropoutStream::of(d.seed, d.offset, d.keep_below, 1, 2, kHeads);
      const philox::U32x4 words = stream.group(i, j);
      for (const int64_t di : {0, 8}) {
        for (const int64_t dj : {0, 1}) {
          const int64_t row = base_row + di;
          const int64_t key = j - j % 2 + dj;
          const philox::U32x4 same = stream.group(row, key);
          for (int c = 0; c < 4; ++c) EXPECT_EQ(same.x[c], words.x[c]) << row << ", " << key;
          const int w = DropoutStream::word_of(row, key);
          EXPECT_EQ(w, static_cast<int>(2 * (di / 8) + dj));
          EXPECT_EQ(dropout_keeps(d, 1, 2, kHeads, row, key), words.x[w] < d.keep_below);
        }
      }
      // Another group: other words (equal by chance with probability 2^-32).
      EXPECT_NE(stream.group(base_row + 16, j).x[0], words.x[0]);
      EXPECT_NE(stream.group(i, j + 2).x[0], words.x[0]);
    }
  }
}

// The contract's mapping written out: counter (key >> 1, the row's group,
// batch Hq + head, offset's low word), key (seed's low word, seed's high
// word ^ offset's high word).
TEST(DropoutKeepsTest, MatchesTheContractsMapping) {
  const u64 seed = 0xDEADBEEF01234567ull;
  const u64 offset = 0x0000000700000123ull;
  const DropoutParams d = dropout_params(0.4, seed, offset);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 40; ++i)
        for (int64_t j = 0; j < 9; ++j) {
          const philox::U32x4 counter{{static_cast<u32>(j / 2), static_cast<u32>((i / 16) * 8 + i % 8),
                                       static_cast<u32>(b * 3 + h), 0x00000123u}};
          const philox::U32x4 w = philox::philox4x32_10(counter, 0x01234567u, 0xDEADBEEFu ^ 0x00000007u);
          const u32 bits = w.x[2 * ((i / 8) % 2) + j % 2];
          EXPECT_EQ(dropout_keeps(d, b, h, 3, i, j), bits < d.keep_below) << b << " " << h << " " << i << " " << j;
        }
}

}  // namespace
}  // namespace attune
