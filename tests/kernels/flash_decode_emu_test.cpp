// Split-KV decode on the emulator against the fp64 reference, with the
// forward issue's accuracy rule (error at most twice the naive storage-dtype
// computation's, plus a floor): FlashAttention's split-KV shapes scaled to
// the emulator, GQA 8:1, contiguous and paged caches, 1 to 17 splits. Every
// launch runs under the emulator's detectors (a race, an early cp.async
// read, an out-of-bounds access throws), so they stay silent on all of it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/runtime.h"
#include "tests/support/covering_set.h"
#include "tests/support/decode_cases.h"
#include "tests/support/emu_forward.h"

namespace attune {
namespace {

using testing::DecodeCase;

void check_case(const DecodeCase& c, const Variant& variant, int splits) {
  const testing::Inputs in = testing::make_decode_inputs(c);
  const std::string what = variant.id() + " on " + c.name + " with " + std::to_string(splits) + " splits";
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data());
  ReferenceOutput got;
  try {
    got = testing::run_on_emulator(in, variant, splits);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << what << ": " << why;
}

// FlashAttention's split-KV (Sq x Sk) shapes, scaled down for the emulator;
// two sequences with different cache lengths, GQA 8:1, bottom-right causal.
std::vector<DecodeCase> split_kv_cases(int64_t page_size) {
  const std::pair<int64_t, int32_t> shapes[] = {{1, 339}, {3, 1024}, {64, 800}, {3, 799}, {16, 2000}};
  std::vector<DecodeCase> cases;
  for (const auto& [sq, sk] : shapes) {
    DecodeCase c;
    c.name = std::to_string(sq) + "x" + std::to_string(sk) + (page_size > 0 ? "_paged" : "_contiguous");
    c.batch = 2;
    c.seqlen_q = sq;
    c.cache_seqlens = {sk, std::max<int32_t>(sk - 37, static_cast<int32_t>(sq))};
    c.page_size = page_size;
    cases.push_back(c);
  }
  return cases;
}

Variant heuristic_for(const DecodeCase& c) {
  return heuristic_decode_variant(testing::make_decode_inputs(c).problem, require_arch("sm_90a"));
}

class DecodeSplitsTest : public ::testing::TestWithParam<int> {};

TEST_P(DecodeSplitsTest, SplitKvShapesContiguousCache) {
  for (const DecodeCase& c : split_kv_cases(0)) check_case(c, heuristic_for(c), GetParam());
}

TEST_P(DecodeSplitsTest, SplitKvShapesPagedCache) {
  for (const DecodeCase& c : split_kv_cases(64)) check_case(c, heuristic_for(c), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Splits, DecodeSplitsTest, ::testing::Values(1, 2, 3, 5, 17));

TEST(FlashDecodeEmuTest, CoveringSetOnSmallCaches) {
  const std::vector<Variant> set = testing::covering_set(require_arch("sm_90a"), "decode");
  const KernelSpec& kernel = kernel_for_op("decode");
  for (std::size_t i = 0; i < kernel.tunables.size(); ++i) {
    for (int value : kernel.tunables[i].values) {
      bool covered = false;
      for (const Variant& v : set) covered = covered || v.values[i] == value;
      EXPECT_TRUE(covered) << kernel.tunables[i].name << " = " << value;
    }
  }
  for (const Variant& v : set) {
    const int64_t d = v.values.front();
    DecodeCase paged = testing::paged_odd_case(d);
    DecodeCase window{.name = "5x150_window",
                      .batch = 1,
                      .seqlen_q = 5,
                      .heads_q = 8,
                      .heads_kv = 1,
                      .head_dim_k = d,
                      .head_dim_v = d,
                      .cache_seqlens = {150},
                      .mask = Mask::window(20, 0)};
    check_case(paged, v, 3);
    check_case(window, v, 4);  // most splits see no key of the window: empty splits
  }
}

TEST(FlashDecodeEmuTest, EmptyCachesGiveZeroRowsWithMinusInfinityLse) {
  DecodeCase c{.name = "empty_cache",
               .batch = 3,
               .seqlen_q = 2,
               .heads_q = 4,
               .heads_kv = 2,
               .cache_seqlens = {0, 45, 0},
               .page_size = 16};
  const testing::Inputs in = testing::make_decode_inputs(c);
  for (int splits : {1, 3}) {
    const ReferenceOutput got =
        testing::run_on_emulator(in, heuristic_decode_variant(in.problem, require_arch("sm_90a")), splits);
    const AttentionProblem& p = in.problem;
    for (int64_t b : {0, 2}) {
      for (int64_t h = 0; h < p.heads_q; ++h) {
        for (int64_t i = 0; i < p.seqlen_q; ++i) {
          EXPECT_TRUE(std::isinf(got.lse[static_cast<std::size_t>(reference_lse_index(p, b, i, h))]));
          for (int64_t d = 0; d < p.head_dim_v; ++d) {
            EXPECT_EQ(got.o[static_cast<std::size_t>(reference_o_index(p, b, i, h) + d)], 0.0);
          }
        }
      }
    }
    check_case(c, heuristic_decode_variant(in.problem, require_arch("sm_90a")), splits);
  }
}

TEST(FlashDecodeEmuTest, RuntimeDecodeOnTheEmulatorPicksSplitsAndAgrees) {
  DecodeCase c{.name = "runtime",
               .batch = 1,
               .seqlen_q = 1,
               .heads_q = 8,
               .heads_kv = 1,
               .cache_seqlens = {700},
               .page_size = 32};
  const testing::Inputs in = testing::make_decode_inputs(c);
  Runtime runtime({.backend = Backend::kEmu});
  const DecodeChoice choice = runtime.explain_decode(in.problem);
  EXPECT_GT(choice.splits, 1) << choice.reason;  // one CTA alone would leave the GPU idle
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(in.problem)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(in.problem)));
  runtime.forward(in.problem, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()});  // paged: decode
  ReferenceOutput got;
  for (std::uint16_t bits : o) got.o.push_back(bits_to_float(in.problem.dtype, bits));
  got.lse.assign(lse.begin(), lse.end());
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data());
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << why;
}

}  // namespace
}  // namespace attune
