// A planted kernel bug: the forward kernel with the barrier between pipeline
// stages removed (a copy made at configure time, see CMakeLists.txt). The
// emulator must report the race; the real kernel runs clean on the same input.
#include <gtest/gtest.h>

#include <bit>

#include "emulator/emulator.h"
#include "flash_fwd_missing_barrier.cuh"
#include "runtime/launch/flash_fwd_params.h"
#include "tests/support/emu_forward.h"
#include "tests/support/families.h"

namespace attune {
namespace {

TEST(FlashFwdPlantedBugTest, MissingBarrierBetweenStagesIsARace) {
  const testing::Inputs in = testing::make_inputs(testing::odd_length_families(DType::kBF16, 32, 32)[0]);  // 113x203
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  emu::Emulator emulator;
  testing::register_forward_buffers(emulator, in, o, lse);
  const FlashFwdParams params = flash_fwd_params(p, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()}, {});
  const LaunchConfig config = flash_fwd_launch(p, parse_variant_id("flash_fwd/d32.bm64.bn32.wm4.wn1.st2.qr0"));
  EXPECT_NO_THROW(emulator.launch(&flash_fwd<32, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0>, config, params));
  try {
    // The mutant's params type is its own copy of FlashFwdParams (same layout).
    emulator.launch(&flash_fwd_missing_barrier::flash_fwd<32, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0>, config,
                    std::bit_cast<flash_fwd_missing_barrier::FlashFwdParams>(params));
    FAIL() << "the missing barrier was not reported";
  } catch (const emu::KernelFault& fault) {
    ASSERT_FALSE(fault.reports().empty());
    EXPECT_TRUE(fault.has(emu::BugKind::kSharedRace) || fault.has(emu::BugKind::kAsyncCopyReadBeforeWait))
        << fault.what();
    EXPECT_NE(fault.reports().front().site.find("flash_fwd_missing_barrier.cuh"), std::string::npos)
        << fault.reports().front().to_string();
  }
}

}  // namespace
}  // namespace attune
