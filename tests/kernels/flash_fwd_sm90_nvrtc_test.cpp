// The Hopper forward family compiled with NVRTC for sm_90a: the covering
// set of its variants (every value of every tunable at least once, the two
// dtypes alternating) and the heuristic's choice of each head-dim bucket
// compile without spills and without a ptxas C75xx warning (wgmma
// serialized: compile_with_nvrtc refuses those), and their SASS holds the
// machinery the family is about: HGMMA and UTMALDG. ATTUNE_SM90_SWEEP=all
// compiles every enumerated variant of every bucket (about half an hour on
// two cores; docs/kernels.md has the last count).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "profile/sass.h"
#include "runtime/dispatch/heuristics.h"
#include "tests/support/covering_set.h"
#include "tests/support/nvrtc_sweep.h"

namespace attune {
namespace {

const KernelSpec& sm90() { return *find_kernel_spec("flash_fwd_sm90"); }

std::vector<Variant> sweep_set() {
  const ArchLimits arch = require_arch("sm_90a");
  const char* all = std::getenv("ATTUNE_SM90_SWEEP");
  if (all != nullptr && std::string(all) == "all") return testing::family_variants(sm90(), arch);
  std::vector<Variant> set = testing::covering_set_of(sm90(), arch);
  for (int d : sm90().tunables.front().values) {
    const Variant h = heuristic_variant("fwd", DType::kBF16, d, d, arch);
    if (std::find(set.begin(), set.end(), h) == set.end()) set.push_back(h);
  }
  return set;
}

TEST(FlashFwdSm90NvrtcTest, CompilesWithoutSpillsToWgmmaAndTma) {
  const std::vector<Variant> set = sweep_set();
  const std::vector<CompileResult> results = testing::compile_all(
      set, [](std::size_t i) { return i % 2 == 0 ? DType::kBF16 : DType::kF16; }, "sm_90a", "flash_fwd_sm90.cu");
  std::string no_sass;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const CompileResult& r = results[i];
    ASSERT_TRUE(r.ok) << set[i].id() << ":\n" << r.log;
    EXPECT_FALSE(r.spills()) << set[i].id() << ": " << r.spill_bytes << " bytes spilled\n" << r.log;
    EXPECT_GT(r.registers, 0) << set[i].id();
    profile::SassMix mix;
    try {
      mix = profile::count_sass(profile::disassemble(r.cubin));
    } catch (const Error& e) {
      no_sass = e.what();
      continue;
    }
    EXPECT_GT(mix["HGMMA"], 0) << set[i].id();
    EXPECT_GT(mix["UTMALDG"], 0) << set[i].id();
    std::cout << set[i].id() << ": " << r.registers << " registers, HGMMA " << mix["HGMMA"] << ", UTMALDG "
              << mix["UTMALDG"] << ", UTMASTG " << mix["UTMASTG"] << ", " << r.seconds << " s\n";
  }
  ::testing::Test::RecordProperty("variants", static_cast<int>(set.size()));
  if (!no_sass.empty()) GTEST_SKIP() << "compiled without spills; SASS not checked: " << no_sass;
}

}  // namespace
}  // namespace attune
