// The variant space: enumeration per architecture, canonical ids, parsing
// with clear errors, the head-dim bucket and the heuristic default.
#include "generator/variants.h"
#include "generated/kernel_shapes.h"
#include "runtime/dispatch/heuristics.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "tests/support/error_of.h"

namespace attune {
namespace {

TEST(VariantsTest, EveryIdRoundTripsAndFitsItsArchitecture) {
  for (const char* arch_name : {"sm_80", "sm_86", "sm_90a"}) {
    const ArchLimits arch = *parse_arch(arch_name);
    for (int d : {8, 32, 50, 64, 100, 128, 200, 256}) {
      const std::vector<Variant> variants = enumerate_variants("fwd", DType::kBF16, d, d, arch);
      ASSERT_FALSE(variants.empty()) << arch_name << " d" << d;
      std::set<std::string> ids;
      for (const Variant& v : variants) {
        EXPECT_TRUE(ids.insert(v.id()).second) << "duplicate " << v.id();
        EXPECT_EQ(parse_variant_id(v.id()), v) << v.id();
        EXPECT_LE(v.shared_bytes(), arch.max_shared_bytes) << v.id();
        EXPECT_LE(v.threads(), v.kernel->id == KernelId::kFlashFwdSm90 ? 512 : 256) << v.id();
        EXPECT_GE(v.values.front(), d) << v.id();
        EXPECT_NO_THROW(check_variant_fits(v, d, d, arch)) << v.id();
      }
    }
  }
}

TEST(VariantsTest, SmallerSharedMemoryPrunesVariants) {
  const auto big = enumerate_variants("fwd", DType::kF16, 128, 128, *parse_arch("sm_90a"));
  const auto small = enumerate_variants("fwd", DType::kF16, 128, 128, *parse_arch("sm_86"));
  EXPECT_LT(small.size(), big.size());
  const Variant deep = parse_variant_id("flash_fwd/d128.bm128.bn64.wm8.wn1.st4.qr0");
  EXPECT_EQ(deep.shared_bytes(), 2 * (128 * 128 + 2 * 4 * 64 * 128));
  EXPECT_NE(std::find(big.begin(), big.end(), deep), big.end());
  EXPECT_EQ(std::find(small.begin(), small.end(), deep), small.end());
  EXPECT_NE(testing::error_of<InvalidArgument>([&] {
              check_variant_fits(deep, 128, 128, *parse_arch("sm_86"));
            }).find("needs 163840 bytes of shared memory; sm_86 allows 101376"),
            std::string::npos);
}

TEST(VariantsTest, HeadDimBucketHoldsTheLargerHeadDim) {
  const KernelSpec& k = kernel_for_op("fwd");
  EXPECT_EQ(head_dim_bucket(k, 1, 1), 32);
  EXPECT_EQ(head_dim_bucket(k, 100, 20), 128);
  EXPECT_EQ(head_dim_bucket(k, 20, 129), 160);
  EXPECT_EQ(head_dim_bucket(k, 256, 256), 256);
  EXPECT_NE(testing::error_of<InvalidArgument>([&] {
              head_dim_bucket(k, 257, 1);
            }).find("got max(Dk, Dv) = 257; expected at most 256"),
            std::string::npos);
  const Variant small = parse_variant_id("flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0");
  EXPECT_NE(testing::error_of<InvalidArgument>([&] {
              check_variant_fits(small, 65, 64, *parse_arch("sm_90a"));
            }).find("head-dim bucket 64 is below max(Dk, Dv) = 65; expected a variant of bucket 96"),
            std::string::npos);
}

TEST(VariantsTest, BadIdsAreRejectedWithTheReason) {
  const struct {
    const char* id;
    const char* reason;
  } bad_ids[] = {
      {"flash_fwd", "no '/'"},
      {"flash_nope/d64", "unknown kernel 'flash_nope'"},
      {"flash_fwd/d64.bm96.bn64.wm4.wn1.st2", "'bm96'; expected bm followed by one of {64, 128}"},
      {"flash_fwd/d64.bm64.bn64.wm4.wn1", "missing st; expected st followed by one of {1, 2, 3, 4}"},
      {"flash_fwd/d64.bm64.bn64.wm4.wn1.st2.qr0.x1", "trailing 'x1'"},
      // 8 warps of 8 rows: not a multiple of the 16-row mma tile.
      {"flash_fwd/d64.bm64.bn64.wm8.wn1.st2.qr0", "break the template's constraints"},
  };
  for (const auto& bad : bad_ids) {
    EXPECT_NE(testing::error_of<InvalidArgument>([&] { parse_variant_id(bad.id); }).find(bad.reason), std::string::npos)
        << bad.id;
  }
  EXPECT_NE(testing::error_of<InvalidArgument>([] {
              kernel_for_op("bwd2");
            }).find("--op: got 'bwd2'; expected fwd, decode or bwd"),
            std::string::npos);
  EXPECT_FALSE(parse_arch("sm_75").has_value());
}

TEST(VariantsTest, HeuristicIsAnEnumeratedVariant) {
  for (const char* arch_name : {"sm_80", "sm_86", "sm_90a"}) {
    const ArchLimits arch = *parse_arch(arch_name);
    for (int d : {16, 64, 96, 128, 192, 256}) {
      const Variant h = heuristic_variant("fwd", DType::kF16, d, d, arch);
      const auto all = enumerate_variants("fwd", DType::kF16, d, d, arch);
      EXPECT_NE(std::find(all.begin(), all.end(), h), all.end()) << h.id();
    }
  }
  // FlashAttention-3's tiles on Hopper, which the measured registers admit
  // (192 x 128 at d64, 128 x 176 at d128, 128 x 80 at d256),
  // FlashAttention-2's elsewhere and where the Hopper family cannot map a call.
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, *parse_arch("sm_90a")).id(),
            "flash_fwd_sm90/d128.bm128.bn176.st2.pp1.ov1.ra0.ts1.sc1");
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 256, 256, *parse_arch("sm_90a")).id(),
            "flash_fwd_sm90/d256.bm128.bn80.st2.pp1.ov1.ra0.ts1.sc1");
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 64, 64, *parse_arch("sm_90a")).id(),
            "flash_fwd_sm90/d64.bm192.bn128.st2.pp0.ov1.ra0.ts1.sc1");
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, *parse_arch("sm_90a"), 0, {.masked = true}).id(),
            "flash_fwd_sm90/d128.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc2");
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, *parse_arch("sm_90a"), 0, {.portable_only = true}).id(),
            "flash_fwd/d128.bm64.bn32.wm4.wn1.st2.qr1");
  EXPECT_EQ(heuristic_variant("fwd", DType::kBF16, 128, 128, *parse_arch("sm_80")).id(),
            "flash_fwd/d128.bm64.bn32.wm4.wn1.st2.qr1");
}

TEST(VariantsTest, NameExpressionInstantiatesTheTemplate) {
  const Variant v = parse_variant_id("flash_fwd/d64.bm128.bn64.wm8.wn1.st3.qr1");
  EXPECT_EQ(v.name_expression(DType::kBF16),
            "attune::flash_fwd<64, 128, 64, 8, 1, 3, 1, attune::Bf16, 0, 0, 0, 0, 0, 0>");
  EXPECT_EQ(v.name_expression(DType::kF16),
            "attune::flash_fwd<64, 128, 64, 8, 1, 3, 1, attune::Fp16, 0, 0, 0, 0, 0, 0>");
  EXPECT_EQ(FlashFwdShape::of(v).stages, 3);
  EXPECT_EQ(v.threads(), 256);
}

}  // namespace
}  // namespace attune
