// Every backward variant enumerated for fp16 and bf16 at Dk = Dv in {64,
// 128} compiles with NVRTC for sm_80 and sm_90a, and so do the preprocess
// and dQ-convert kernels; registers and spills are reported (the register
// model of FlashBwdTunables::valid keeps every one of them at or under 255).
// At larger head dims some variants spill; none spills more than it did
// before the swizzled layouts (a recorded baseline).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "generator/variants.h"
#include "runtime/launch/flash_bwd_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

using Case = testing::NvrtcCase;

class FlashBwdNvrtcTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashBwdNvrtcTest, EveryVariantCompiles) { testing::sweep_op(GetParam(), "bwd"); }

INSTANTIATE_TEST_SUITE_P(Bwd, FlashBwdNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

TEST(FlashBwdNvrtcTest, RowKernelsCompile) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      const testing::SweepSummary summary =
          testing::compile_sweep({bwd_preprocess_variant(), bwd_dq_convert_variant()}, dtype, arch, "flash_bwd.cu");
      EXPECT_EQ(summary.compiled, 2) << arch << " " << to_string(dtype);
      EXPECT_EQ(summary.spilling, 0) << arch << " " << to_string(dtype);
    }
  }
}

// The variants of tests/kernels/data/bwd_spills_before_swizzle.txt, each
// compiled for its arch: its spill bytes are at most the recorded ones.
TEST(FlashBwdNvrtcTest, SpillsNoMoreThanBefore) {
  const std::string path = std::string(ATTUNE_SOURCE_DIR) + "/tests/kernels/data/bwd_spills_before_swizzle.txt";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  struct Entry {
    std::string id;
    int before;
  };
  std::map<std::string, std::vector<Entry>> by_arch;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Entry e;
    std::string arch;
    ASSERT_TRUE(fields >> e.id >> arch >> e.before) << path << ": bad line '" << line << "'";
    by_arch[arch].push_back(e);
  }
  ASSERT_FALSE(by_arch.empty()) << path << " lists no variant";
  int compared = 0;
  for (const auto& [arch, entries] : by_arch) {
    std::vector<Variant> variants;
    for (const Entry& e : entries) variants.push_back(parse_variant_id(e.id));
    const testing::SweepSummary summary = testing::compile_sweep(variants, DType::kBF16, arch.c_str(), "flash_bwd.cu");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      EXPECT_LE(summary.spill_bytes[i], entries[i].before)
          << entries[i].id << " on " << arch << " spills more than before the swizzled layouts";
      ++compared;
    }
  }
  RecordProperty("compared", compared);
}

}  // namespace
}  // namespace attune
