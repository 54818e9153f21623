// emulator/cp_async.cpp: copies land at their wait; a read of a destination
// whose group has not been waited on is reported, not a race.
#include <gtest/gtest.h>

#include <string>

#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

// --- a double-buffered cp.async pipeline over tiles of 128 floats ---------

template <bool kWaitAllOnLastTile>
ATTUNE_KERNEL void pipelined_sum(Buffers p) {
  constexpr i32 kTile = 128;
  float* buf = dev::shared_memory<float>();  // two tiles
  const i32 t = dev::thread_index().x;       // 32 threads, 4 floats each
  const i32 tiles = p.n / kTile;
  const auto issue = [&](i32 tile) {
    dev::cp_async::copy16(buf + (tile % 2) * kTile + 4 * t, p.in + tile * kTile + 4 * t, 16);
    dev::cp_async::commit();
  };
  issue(0);
  float sum = 0.0F;
  for (i32 tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) issue(tile + 1);
    if (kWaitAllOnLastTile && tile + 1 == tiles) {
      dev::cp_async::wait<0>();
    } else {
      dev::cp_async::wait<1>();  // wrong on the last tile: its group is the newest one
    }
    dev::block::sync();
    for (i32 i = 0; i < 4; ++i) sum += dev::load_shared(buf + (tile % 2) * kTile + 4 * ((t + 1) % 32) + i);
    dev::block::sync();
  }
  dev::store_global(p.out + t, sum);
}

constexpr LaunchConfig kPipeline = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 2 * 128 * 4};

TEST(CpAsyncTest, CorrectPipelineRunsClean) {
  Fixture f(3 * 128, 32);
  f.emulator.launch(&pipelined_sum<true>, kPipeline, f.params());
  // Thread t sums elements 4*((t+1)%32) .. +3 of each of the three tiles.
  for (int t = 0; t < 32; ++t) {
    float want = 0;
    for (int tile = 0; tile < 3; ++tile)
      for (int i = 0; i < 4; ++i) want += static_cast<float>(tile * 128 + 4 * ((t + 1) % 32) + i);
    EXPECT_EQ(f.out[t], want) << t;
  }
}

TEST(CpAsyncTest, WaitGroupOneWhereZeroIsNeededIsReported) {
  Fixture f(3 * 128, 32);
  const KernelFault fault = expect_fault(&pipelined_sum<false>, kPipeline, f.params(), f.emulator);
  ASSERT_FALSE(fault.reports().empty());
  const emu::BugReport& first = fault.reports().front();
  EXPECT_EQ(first.kind, BugKind::kAsyncCopyReadBeforeWait) << fault.what();
  // Last tile (2) sits in buffer 0; thread 0 reads floats 4..7 that thread 1 copies.
  EXPECT_EQ(first.thread.x, 0) << first.to_string();
  EXPECT_NE(first.detail.find("shared bytes [16, 20)"), std::string::npos) << first.detail;
  EXPECT_NE(first.detail.find("thread (1,0,0)"), std::string::npos) << first.detail;
  EXPECT_FALSE(fault.has(BugKind::kSharedRace)) << fault.what();
}
}  // namespace
}  // namespace attune::emu_test
