// Forward-kernel variants on the emulator against the fp64 reference, with
// FlashAttention's accuracy rule, over the seed families and FlashAttention's
// odd sequence-length pairs. A launch the emulator finds a bug in throws.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/accuracy.h"
#include "tests/support/emu_forward.h"

namespace attune {
namespace {

void check_families(const Variant& variant, const std::vector<testing::Family>& families) {
  for (const testing::Family& family : families) {
    const testing::Inputs in = testing::make_inputs(family);
    const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
    const ReferenceOutput naive = testing::naive_storage_attention(in);
    const ReferenceOutput got = testing::run_on_emulator(in, variant);
    std::string why;
    EXPECT_TRUE(testing::within_accuracy_rule(got, want, naive, 2.0, &why))
        << variant.id() << " on " << family.name << ": " << why;
  }
}

TEST(FlashFwdEmuTest, SeedFamiliesBf16) {
  check_families(parse_variant_id("flash_fwd/d32.bm64.bn32.wm4.wn1.st2"), testing::seed_families(DType::kBF16));
}

TEST(FlashFwdEmuTest, OddLengthsBf16) {
  check_families(parse_variant_id("flash_fwd/d32.bm64.bn32.wm4.wn1.st2"),
                 testing::odd_length_families(DType::kBF16, 32, 32));
}

}  // namespace
}  // namespace attune
