// Forward-kernel variants on the emulator against the fp64 reference, with
// FlashAttention's accuracy rule (error at most twice that of the naive
// storage-dtype computation, plus a floor). The covering set holds every
// value of every tunable at least once and every warp partition; each runs
// the seed families (every mask kind) and FlashAttention's odd sequence-length
// pairs at its head dim. A launch in which the emulator finds a bug (race,
// cp.async read before wait, out of bounds, divergence) throws, so the
// detectors staying silent is part of every check.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "tests/support/covering_set.h"
#include "tests/support/decode_cases.h"
#include "tests/support/emu_forward.h"

namespace attune {

namespace {

void check_families(const Variant& variant, const std::vector<testing::Family>& families) {
  for (const testing::Family& family : families) {
    testing::expect_forward_matches_reference(variant, testing::make_inputs(family), family.name);
  }
}

// Chunked prefill over a paged cache (pages of 16, so every key tile
// crosses pages; a shuffled block table): packed query chunks of 70 and 3
// rows, bottom-right causal against decode's covering-set caches (203 and 77
// keys, GQA, Dk != Dv).
testing::Inputs paged_chunks(DType dtype, int head_dim) {
  testing::DecodeCase chunks = testing::paged_odd_case(head_dim);
  chunks.name = "chunks_over_paged16";
  chunks.query_lens = {70, 3};
  chunks.dtype = dtype;
  return testing::make_decode_inputs(chunks);
}

std::vector<Variant> covering_set() { return testing::covering_set(require_arch("sm_90a")); }

TEST(FlashFwdEmuTest, CoveringSetCoversEveryTunableValue) {
  testing::expect_covers_every_tunable_value(covering_set(), "fwd");
}

class CoveringSetTest : public ::testing::TestWithParam<Variant> {};

TEST_P(CoveringSetTest, MatchesReferenceOnSeedAndOddLengthFamilies) {
  const Variant& variant = GetParam();
  const DType dtype = testing::check_covering_families(covering_set(), variant, check_families);
  // The same kernel reading a paged cache through its block table.
  const testing::Inputs paged = paged_chunks(dtype, variant.values.front());
  testing::expect_forward_matches_reference(with_problem_features(variant, paged.problem), paged,
                                            "chunks over a paged cache");
}

INSTANTIATE_TEST_SUITE_P(Variants, CoveringSetTest, ::testing::ValuesIn(covering_set()), testing::variant_test_name);

TEST(FlashFwdEmuTest, APagedCacheNeedsAVariantCompiledWithPaging) {
  const testing::Inputs paged = paged_chunks(DType::kBF16, 64);
  const Variant plain =
      heuristic_variant("fwd", DType::kBF16, 64, 56, require_arch("sm_90a"), 0, {.portable_only = true});
  try {
    testing::run_on_emulator(paged, plain);
    FAIL() << plain.id() << " ran a paged cache";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compiled without paged, which the problem uses"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(with_problem_features(plain, paged.problem).id(), plain.id() + ".paged1");
}

TEST(FlashFwdEmuTest, StridedInputsAndOutputs) {
  // Q and O inside wider rows (as a slice of a fused QKV projection would be).
  testing::Family family = testing::odd_length_families(DType::kBF16, 64, 64)[2];
  testing::Inputs in = testing::make_inputs(family);
  AttentionProblem strided = in.problem;
  strided.q_strides = {.batch = in.problem.seqlen_q * 3 * 64 * 2, .seq = 3 * 64 * 2, .head = 3 * 64};
  strided.o_strides = {.batch = in.problem.seqlen_q * 2 * 72, .seq = 2 * 72, .head = 72};
  std::vector<std::uint16_t> q(static_cast<std::size_t>(q_extent(strided)), 0);
  for (int64_t i = 0; i < in.problem.seqlen_q; ++i)
    for (int64_t h = 0; h < in.problem.heads_q; ++h)
      for (int64_t d = 0; d < 64; ++d)
        q[static_cast<std::size_t>(element_offset(strided.q_strides, 0, i, h) + d)] =
            in.q[static_cast<std::size_t>(element_offset(in.problem.q_strides, 0, i, h) + d)];
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(strided)), 0);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(strided)));
  const Variant variant = heuristic_variant("fwd", DType::kBF16, 64, 64, require_arch("sm_90a"));
  emulate_forward(strided, {q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}, variant);
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data());
  ReferenceOutput got;
  got.lse.assign(lse.begin(), lse.end());
  for (int64_t i = 0; i < in.problem.seqlen_q; ++i)
    for (int64_t h = 0; h < in.problem.heads_q; ++h)
      for (int64_t d = 0; d < 64; ++d)
        got.o.push_back(
            bits_to_float(DType::kBF16, o[static_cast<std::size_t>(element_offset(strided.o_strides, 0, i, h) + d)]));
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << why;
}

}  // namespace
}  // namespace attune
