// The backward's variants at Dk = Dv in {64, 128}, fp16 and bf16, compile
// with NVRTC for sm_80 and sm_90a without spills (a covering set of each
// bucket; every variant with ATTUNE_BWD_SWEEP=all), and so do the preprocess
// and dQ-convert kernels. At larger head dims some variants spill; none
// spills more than it did before the swizzled layouts (a recorded baseline).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "generator/variants.h"
#include "runtime/launch/flash_bwd_params.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

class FlashBwdNvrtcTest : public ::testing::TestWithParam<testing::NvrtcCase> {};

TEST_P(FlashBwdNvrtcTest, EveryVariantCompiles) { testing::sweep_op(GetParam(), "bwd"); }

INSTANTIATE_TEST_SUITE_P(Bwd, FlashBwdNvrtcTest, testing::nvrtc_cases(), testing::nvrtc_case_name);

TEST(FlashBwdNvrtcTest, RowKernelsCompile) {
  testing::expect_compiled_everywhere_without_spills({bwd_preprocess_variant(), bwd_dq_convert_variant()},
                                                     "flash_bwd.cu");
}

// The variants of tests/kernels/data/bwd_spills_before_swizzle.txt, each
// compiled for its arch: its spill bytes are at most the recorded ones. Of
// each head dim and arch, the least and the most spilling entries (16 of 64;
// a change in register pressure moves them all), every entry with
// ATTUNE_BWD_SWEEP=all.
TEST(FlashBwdNvrtcTest, SpillsNoMoreThanBefore) {
  const std::string path = std::string(ATTUNE_SOURCE_DIR) + "/tests/kernels/data/bwd_spills_before_swizzle.txt";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  struct Entry {
    std::string id;
    int before;
  };
  const char* sweep = std::getenv("ATTUNE_BWD_SWEEP");
  const bool every = sweep != nullptr && std::string(sweep) == "all";
  std::map<std::string, std::vector<Entry>> by_arch;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Entry e;
    std::string arch;
    ASSERT_TRUE(fields >> e.id >> arch >> e.before) << path << ": bad line '" << line << "'";
    by_arch[arch].push_back(e);
  }
  if (!every) {
    for (auto& [arch, entries] : by_arch) {
      std::map<int, std::pair<Entry, Entry>> extremes;  // head dim -> (least, most)
      for (const Entry& e : entries) {
        const int d = parse_variant_id(e.id).values[0];
        auto [at, fresh] = extremes.try_emplace(d, e, e);
        if (fresh) continue;
        if (e.before < at->second.first.before) at->second.first = e;
        if (e.before > at->second.second.before) at->second.second = e;
      }
      entries.clear();
      for (const auto& [d, pair] : extremes) {
        entries.push_back(pair.first);
        if (pair.second.id != pair.first.id) entries.push_back(pair.second);
      }
    }
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
