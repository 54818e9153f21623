// The Hopper forward family (flash_fwd_sm90) on the emulator against the
// fp64 reference with the forward's accuracy rule: a covering set (every
// value of every tunable at least once) over the seed families and
// FlashAttention's odd shapes, re-laid so TMA can map them; every detector
// (TMA, mbarriers, wgmma operands, async-proxy order, races) silent. Then
// what the runtime adds: calls TMA cannot map fall back to flash_fwd, the
// tensor maps of a repeated call are not encoded again, and the heuristic
// picks the family on sm_90a only.
#include <gtest/gtest.h>

#include <string>

#include "generated/kernel_shapes.h"
#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_fwd_sm90_params.h"
#include "runtime/launch/ops.h"
#include "tests/support/covering_set.h"
#include "tests/support/emu_forward.h"
#include "tests/support/tma_layout.h"

namespace attune {

namespace {

const KernelSpec& sm90() { return *find_kernel_spec("flash_fwd_sm90"); }

void check_families(const Variant& variant, const std::vector<testing::Family>& families) {
  for (const testing::Family& family : families) {
    const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(family));
    ASSERT_EQ(sm90_unfit_reason(in.problem), "") << family.name;  // the kernel itself runs, not the fallback
    testing::expect_forward_matches_reference(variant, in, family.name);
  }
}

std::vector<Variant> covering_set() { return testing::covering_set_of(sm90(), require_arch("sm_90a")); }

TEST(FlashFwdSm90EmuTest, CoveringSetCoversEveryTunableValue) {
  testing::expect_covers_every_tunable_value(covering_set(), sm90());
}

class Sm90CoveringSetTest : public ::testing::TestWithParam<Variant> {};

TEST_P(Sm90CoveringSetTest, MatchesReferenceOnSeedAndOddLengthFamilies) {
  testing::check_covering_families(covering_set(), GetParam(), check_families);
}

INSTANTIATE_TEST_SUITE_P(Variants, Sm90CoveringSetTest, ::testing::ValuesIn(covering_set()),
                         testing::variant_test_name);

// The family's heuristic choice of each head-dim bucket (what the dispatcher
// runs on an H100/H200), on a long causal and a packed problem.
TEST(FlashFwdSm90EmuTest, HeuristicChoicesMatchReference) {
  const ArchLimits arch = require_arch("sm_90a");
  for (const int d : {64, 128, 256}) {
    const Variant v = heuristic_variant("fwd", DType::kBF16, d, d, arch, 0, {.masked = true});
    ASSERT_EQ(v.kernel, &sm90()) << v.id();
    testing::Family causal{"causal_300x517",
                           {1, 300, 2, d},
                           {1, 517, 1, d},
                           {1, 517, 1, d},
                           ProblemOptions{.dtype = DType::kBF16, .mask = Mask::causal_bottom_right()}};
    check_families(v, {causal});
  }
}

// Q, K or V off 16-byte alignment (or rows TMA cannot step) runs on
// flash_fwd, loaded when first needed, with the same result.
TEST(FlashFwdSm90EmuTest, CallsTmaCannotMapFallBackToFlashFwd) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1");
  const testing::Inputs contiguous =
      testing::make_inputs(testing::seed_families(DType::kBF16)[1]);  // d 5: rows 5 apart
  EXPECT_NE(sm90_unfit_reason(contiguous.problem), "");
  testing::expect_forward_matches_reference(v, contiguous, "square_causal, contiguous");
}

// The kernel takes the row maximum on unscaled scores (the scale folded
// into the exponent): a scale <= 0 is declined with its value and runs on
// flash_fwd, with the same result.
TEST(FlashFwdSm90EmuTest, ANonPositiveScaleFallsBackToFlashFwd) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm128.bn64.st2.pp1.ov1.ra0.ts1");
  testing::Inputs in = testing::with_tma_strides(testing::make_inputs(testing::seed_families(DType::kBF16)[0]));
  EXPECT_EQ(sm90_unfit_reason(in.problem), "");
  in.problem.scale = -0.25;
  EXPECT_NE(sm90_unfit_reason(in.problem).find("softmax scale -0.25"), std::string::npos)
      << sm90_unfit_reason(in.problem);
  testing::expect_forward_matches_reference(v, in, "negative scale");
}

// The tensor maps of a call are built from its pointers and strides each
// call, and encoded once: the same call again encodes none.
TEST(FlashFwdSm90EmuTest, RepeatedCallEncodesNoTensorMap) {
  const Variant v = parse_variant_id("flash_fwd_sm90/d64.bm64.bn64.st2.pp0.ov0.ra0.ts1");
  const testing::Inputs in = testing::with_tma_strides(testing::make_inputs(testing::seed_families(DType::kBF16)[0]));
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  const AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()};
  EmuBackend backend;
  const ForwardKernels kernels = load_forward(backend, v, p.dtype);
  const auto call_once = [&] {
    CallMemory memory(backend, p, 0, nullptr);
    launch_forward(*backend.begin(nullptr), p, kernels, buffers, memory.metadata());
    memory.finish();
  };
  call_once();
  const std::size_t first = backend.tensor_maps().encodes();
  EXPECT_EQ(first, 3U);  // Q, K, V; O is contiguous with 3 columns: it leaves by direct stores
  call_once();
  EXPECT_EQ(backend.tensor_maps().encodes(), first);
}

TEST(FlashFwdSm90EmuTest, ListedOnSm90aOnlyAndNeverWithModifiers) {
  const auto count = [](const std::vector<Variant>& vs) {
    return std::count_if(vs.begin(), vs.end(),
                         [](const Variant& v) { return v.kernel->id == KernelId::kFlashFwdSm90; });
  };
  EXPECT_GT(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"))), 0);
  EXPECT_EQ(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_80"))), 0);
  EXPECT_EQ(count(enumerate_variants("fwd", DType::kBF16, 128, 128, require_arch("sm_90a"), kModSoftcap)), 0);
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, require_arch("sm_80")).kernel->id, KernelId::kFlashFwd);
  // Every listed variant fits the shared memory and register rules.
  for (const Variant& v : enumerate_variants("fwd", DType::kBF16, 256, 256, require_arch("sm_90a"))) {
    EXPECT_LE(v.shared_bytes(), 232448) << v.id();
    EXPECT_LE(v.threads(), 512) << v.id();
  }
  try {
    check_variant_fits(parse_variant_id("flash_fwd_sm90/d64.bm64.bn64.st2.pp0.ov0.ra0.ts0"), 64, 64,
                       require_arch("sm_80"));
    FAIL() << "an sm_90a variant passed as fitting sm_80";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compiles only for sm_90a"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace attune
