// emulator/counting.cpp: a warp's shared accesses at one template line are
// one instruction, priced in wavefronts by the bank model once the warp
// converges; the other counters count what the speed model needs.
#include <gtest/gtest.h>

#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

// Each lane stores one float `stride` floats after the previous lane's.
template <i32 kStride>
ATTUNE_KERNEL void strided_store(Buffers p) {
  float* s = dev::shared_memory<float>();
  const i32 t = dev::thread_index().x;
  dev::store_shared(s + t * kStride, 1.0F);
  dev::block::sync();
  if (t == 0) dev::store_global(p.out + dev::block_index().x, dev::exp2_approx(dev::load_shared(s)));
}

template <i32 kStride>
emu::LaunchCounters counters_of() {
  Fixture f(1, 2);  // a float per block
  f.emulator.launch(&strided_store<kStride>,
                    {.grid = {2, 1, 1}, .block = {64, 1, 1}, .dynamic_shared_bytes = 64 * 32 * 4}, f.params());
  return f.emulator.counters();
}

TEST(CountingTest, ConsecutiveFloatsAreOneWavefrontPerWarpInstruction) {
  const emu::LaunchCounters c = counters_of<1>();
  // 2 blocks x 2 warps store (4 instructions, 1 wavefront each); thread 0
  // of each block loads one float (1 wavefront).
  EXPECT_EQ(c.shared_instructions, 6U);
  EXPECT_EQ(c.shared_wavefronts, 6U);
  EXPECT_EQ(c.shared_ideal, 6U);
  EXPECT_EQ(c.barriers, 2U);
  EXPECT_EQ(c.ex2, 2U);
  EXPECT_EQ(c.global_bytes, 8U);
  ASSERT_EQ(c.sites.size(), 2U);
  for (const auto& [name, site] : c.sites) EXPECT_NE(name.find("counting_test.cpp:"), std::string::npos) << name;
}

TEST(CountingTest, AStrideOf32FloatsPutsEveryLaneInOneBank) {
  const emu::LaunchCounters c = counters_of<32>();
  EXPECT_EQ(c.shared_instructions, 6U);
  EXPECT_EQ(c.shared_wavefronts, 4U * 32U + 2U);  // 32-way conflicts in each store
  EXPECT_EQ(c.shared_ideal, 6U);
  const auto worst = c.worst(1);
  ASSERT_EQ(worst.size(), 1U);
  EXPECT_EQ(worst[0].instructions, 4U);
  EXPECT_EQ(worst[0].wavefronts, 128U);
}

}  // namespace
}  // namespace attune::emu_test
