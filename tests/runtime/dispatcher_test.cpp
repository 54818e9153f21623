// The dispatch order: memo, tuned best for (device, key), nearest tuned key
// (bucket distance), heuristic; stale or invalid database rows are passed over.
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/heuristics.h"

#include <gtest/gtest.h>

#include "core/problem.h"

namespace attune {
namespace {

class FakeTuned : public TunedSource {
 public:
  std::vector<Entry> entries;
  std::string device;
  mutable int calls = 0;
  std::vector<Entry> best_for_device(const std::string& device_key) const override {
    ++calls;
    return device_key == device ? entries : std::vector<Entry>{};
  }
};

AttentionProblem problem(int64_t sq, int64_t sk, int64_t d = 64, Mask mask = Mask::none()) {
  return make_problem(std::vector<int64_t>{2, sq, 8, d}, std::vector<int64_t>{2, sk, 8, d},
                      std::vector<int64_t>{2, sk, 8, d}, {.dtype = DType::kBF16, .mask = mask});
}

const ArchLimits kArch = *parse_arch("sm_90a");

TEST(ProblemKeyTest, BucketsArePowersOfTwo) {
  EXPECT_EQ(bucket_log2(0), 0);
  EXPECT_EQ(bucket_log2(1), 0);
  EXPECT_EQ(bucket_log2(2), 1);
  EXPECT_EQ(bucket_log2(3), 2);
  EXPECT_EQ(bucket_log2(1024), 10);
  EXPECT_EQ(bucket_log2(1025), 11);
  const ProblemKey key = problem_key(Op::kForward, problem(1000, 4000));
  EXPECT_EQ(key.to_string(), "fwd/bf16/dk64/dv64/none/sq2^10/sk2^12/bh2^4");
  EXPECT_EQ(problem_key(Op::kForward, problem(600, 3000)), key);  // same buckets
  EXPECT_NE(problem_key(Op::kForward, problem(1100, 4000)), key);
  EXPECT_EQ(bucket_distance(key, problem_key(Op::kForward, problem(1100, 1000))), 1 + 2);
  EXPECT_EQ(bucket_distance(key, problem_key(Op::kForward, problem(1000, 4000, 128))), std::numeric_limits<int>::max());
}

TEST(DispatcherTest, HeuristicWithoutDatabase) {
  Dispatcher dispatcher("gpu-a", kArch, nullptr);
  const DispatchChoice& choice = dispatcher.choose(problem(100, 100));
  EXPECT_EQ(choice.rule, DispatchRule::kHeuristic);
  EXPECT_EQ(choice.variant, heuristic_variant("fwd", DType::kBF16, 64, 64, kArch));
  // It says which forward family and why (flash_fwd_sm90 on sm_90a).
  EXPECT_EQ(choice.detail, "no tuning database; flash_fwd_sm90: TMA, wgmma and warp specialization on sm_90a");
  const Dispatcher ampere("gpu-b", require_arch("sm_80"), nullptr);
  EXPECT_EQ(ampere.resolve(problem(100, 100)).detail,
            "no tuning database; flash_fwd: flash_fwd_sm90 needs sm_90a, the device is sm_80");
}

// The problem key has no stride bits, but whether flash_fwd_sm90 can map a
// call depends on them: the memo keeps the two answers of one key apart.
TEST(DispatcherTest, MemoKeepsTheSm90FitApart) {
  Dispatcher dispatcher("gpu-a", kArch, nullptr);
  const AttentionProblem fits = problem(100, 100);
  AttentionProblem odd_rows = fits;
  odd_rows.q_strides.seq += 4;  // not a multiple of 8 elements: no TMA map
  ASSERT_EQ(problem_key(Op::kForward, odd_rows), problem_key(Op::kForward, fits));
  EXPECT_EQ(dispatcher.choose(fits).variant.kernel->id, KernelId::kFlashFwdSm90);
  const DispatchChoice& fallback = dispatcher.choose(odd_rows);
  EXPECT_EQ(fallback.variant.kernel->id, KernelId::kFlashFwd);
  EXPECT_NE(fallback.detail.find("cannot map this call (Q row stride"), std::string::npos) << fallback.detail;
  EXPECT_EQ(dispatcher.choose(fits).variant.kernel->id, KernelId::kFlashFwdSm90);  // both remembered
}

TEST(DispatcherTest, TunedThenNearestThenHeuristic) {
  FakeTuned tuned;
  tuned.device = "gpu-a";
  const ProblemKey exact = problem_key(Op::kForward, problem(1000, 4000));
  const ProblemKey far = problem_key(Op::kForward, problem(16, 16));
  // Two listed variants other than the heuristic's.
  const std::vector<Variant> listed = enumerate_variants("fwd", DType::kBF16, 64, 64, kArch);
  const std::string tuned_id = listed.front().id();
  const std::string far_id = listed.back().id();
  ASSERT_NE(tuned_id, heuristic_variant("fwd", DType::kBF16, 64, 64, kArch).id());
  tuned.entries = {{exact, tuned_id}, {far, far_id}};
  Dispatcher dispatcher("gpu-a", kArch, &tuned);

  const DispatchChoice& hit = dispatcher.choose(problem(1000, 4000));
  EXPECT_EQ(hit.rule, DispatchRule::kTuned);
  EXPECT_EQ(hit.variant.id(), tuned_id);

  const DispatchChoice near = dispatcher.resolve(problem(2000, 4000));  // one doubling away from `exact`
  EXPECT_EQ(near.rule, DispatchRule::kNearestTuned);
  EXPECT_EQ(near.variant.id(), tuned_id);
  EXPECT_NE(near.detail.find("at distance 1"), std::string::npos) << near.detail;

  const DispatchChoice tiny = dispatcher.resolve(problem(20, 20));  // nearer to `far`
  EXPECT_EQ(tiny.variant.id(), far_id);

  const DispatchChoice other_class = dispatcher.resolve(problem(1000, 4000, 128));
  EXPECT_EQ(other_class.rule, DispatchRule::kHeuristic);

  Dispatcher other_device("gpu-b", kArch, &tuned);  // same name elsewhere never counts
  EXPECT_EQ(other_device.resolve(problem(1000, 4000)).rule, DispatchRule::kHeuristic);
}

TEST(DispatcherTest, InvalidDatabaseRowsArePassedOver) {
  FakeTuned tuned;
  tuned.device = "gpu-a";
  const ProblemKey key = problem_key(Op::kForward, problem(1000, 4000));
  tuned.entries = {{key, "flash_fwd/d64.bm96.bn64.wm4.wn1.st2"},  // value outside the domain
                   {key, "flash_fwd/d32.bm64.bn64.wm4.wn1.st2"},  // bucket too small for d64
                   {key, "rm -rf /"}};
  Dispatcher dispatcher("gpu-a", kArch, &tuned);
  const DispatchChoice choice = dispatcher.resolve(problem(1000, 4000));
  EXPECT_EQ(choice.rule, DispatchRule::kHeuristic);
  EXPECT_NE(choice.detail.find("passed over"), std::string::npos) << choice.detail;
  EXPECT_NE(choice.detail.find("bm96"), std::string::npos) << choice.detail;
}

TEST(DispatcherTest, MemoAnswersRepeatsWithoutTheDatabase) {
  FakeTuned tuned;
  tuned.device = "gpu-a";
  Dispatcher dispatcher("gpu-a", kArch, &tuned);
  const AttentionProblem p = problem(512, 512);
  const DispatchChoice* first = &dispatcher.choose(p);
  const int calls = tuned.calls;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(&dispatcher.choose(p), first);
  EXPECT_EQ(tuned.calls, calls);
  // Another bucket is another entry.
  EXPECT_NE(&dispatcher.choose(problem(5000, 512)), first);
}

// Decode: keys by cache length and batch x KV heads; tuned rows carry their
// split count; rows of another kernel or without a split count are passed over.
AttentionProblem decode_problem(int64_t cache, int64_t kv_heads = 2) {
  return make_problem(std::vector<int64_t>{1, 1, 4 * kv_heads, 64}, std::vector<int64_t>{1, cache, kv_heads, 64},
                      std::vector<int64_t>{1, cache, kv_heads, 64}, {.dtype = DType::kBF16});
}

TEST(DispatcherTest, DecodeKeysTheCacheAndCarriesTheSplitCount) {
  const ProblemKey key = problem_key(Op::kDecode, decode_problem(30000));
  EXPECT_EQ(key.to_string(), "decode/bf16/dk64/dv64/none/sq2^2/sk2^15/bh2^1");  // 1 row x 4 heads per KV head
  FakeTuned tuned;
  tuned.device = "gpu-a";
  const std::string decode_id = enumerate_variants("decode", DType::kBF16, 64, 64, kArch).front().id();
  tuned.entries = {{key, heuristic_variant("fwd", DType::kBF16, 64, 64, kArch).id()},  // another kernel
                   {key, decode_id},                                                   // no split count
                   {key, decode_id + "/splits999"},                                    // out of range
                   {key, decode_id + "/splits12"}};
  Dispatcher dispatcher("gpu-a", kArch, &tuned);
  const DispatchChoice choice = dispatcher.resolve(Op::kDecode, decode_problem(20000));
  EXPECT_EQ(choice.rule, DispatchRule::kTuned) << choice.detail;
  EXPECT_EQ(choice.variant.id(), decode_id);
  EXPECT_EQ(choice.splits, 12);
  tuned.entries.pop_back();
  const DispatchChoice fallback = dispatcher.resolve(Op::kDecode, decode_problem(20000));
  EXPECT_EQ(fallback.rule, DispatchRule::kHeuristic);
  EXPECT_GE(fallback.splits, 1);
  for (const char* why : {"not a variant of a decode kernel", "no split count", "splits: got 999"}) {
    EXPECT_NE(fallback.detail.find(why), std::string::npos) << why << " in " << fallback.detail;
  }
  // The forward never sees decode rows.
  EXPECT_EQ(dispatcher.resolve(problem(1, 20000)).rule, DispatchRule::kHeuristic);
}

TEST(DispatcherTest, DecodeHeuristicFillsTheGpuInWholeWaves) {
  Dispatcher dispatcher("gpu-a", kArch, nullptr, 132);
  // One CTA per KV head: 2 CTAs; splits bring it near a full wave of 132.
  const DispatchChoice few = dispatcher.resolve(Op::kDecode, decode_problem(32768));
  EXPECT_GE(few.splits * 2, 132 * 85 / 100) << few.detail;
  EXPECT_LE(few.splits * 2, 2 * 132);
  // Enough CTAs already: no split.
  const AttentionProblem many = make_problem(std::vector<int64_t>{64, 1, 32, 64}, std::vector<int64_t>{64, 4096, 8, 64},
                                             std::vector<int64_t>{64, 4096, 8, 64}, {.dtype = DType::kBF16});
  EXPECT_EQ(dispatcher.resolve(Op::kDecode, many).splits, 1);
  // A short cache: never more splits than key tiles.
  EXPECT_LE(dispatcher.resolve(Op::kDecode, decode_problem(100)).splits, 2);
}

}  // namespace
}  // namespace attune
