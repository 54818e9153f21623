// emulator/scheduler.cpp: a block that can never continue (a barrier or a
// warp collective not reached by every thread) is reported with where each
// thread waits, not hung; a launch shape the GPU refuses is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

// --- barriers and warp collectives in divergent code ----------------------

// The one report of `kernel` run in `blocks` blocks of `threads` threads,
// which must fault (a failure and an empty report otherwise).
emu::BugReport only_report(void (*kernel)(Buffers), i32 blocks, i32 threads) {
  Fixture f(1, static_cast<std::size_t>(threads));
  const KernelFault fault =
      expect_fault(kernel, {.grid = {blocks, 1, 1}, .block = {threads, 1, 1}}, f.params(), f.emulator);
  if (fault.reports().size() != 1) {
    ADD_FAILURE() << "expected one report; got " << fault.reports().size() << ":\n" << fault.what();
    return {};
  }
  return fault.reports().front();
}

ATTUNE_KERNEL void barrier_in_branch(Buffers p) {
  const i32 t = dev::thread_index().x;
  if (t < 64) {
    dev::store_global(p.out + t, 1.0F);
    dev::block::sync();  // threads 64..127 never get here
  }
}

TEST(SchedulerTest, BarrierInDivergentBranchIsReportedNotAHang) {
  const emu::BugReport r = only_report(&barrier_in_branch, 3, 128);
  EXPECT_EQ(r.kind, BugKind::kBarrierDivergence);
  EXPECT_EQ(r.block.x, 0);  // the first block stops the launch
  EXPECT_NE(r.detail.find("threads 0-63 waiting at block::sync"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("threads 64-127 exited"), std::string::npos) << r.detail;
}

ATTUNE_KERNEL void barriers_at_two_sites(Buffers p) {
  const i32 t = dev::thread_index().x;
  if (t % 2 == 0) {
    dev::block::sync();
  } else {
    dev::block::sync();
  }
  dev::store_global(p.out + t, 1.0F);
}

TEST(SchedulerTest, DifferentBarriersInTwoBranchesAreReported) {
  EXPECT_EQ(only_report(&barriers_at_two_sites, 1, 64).kind, BugKind::kBarrierDivergence);
}

ATTUNE_KERNEL void shuffle_in_branch(Buffers p) {
  const i32 lane = dev::lane_id();
  float x = static_cast<float>(lane);
  if (lane < 16) x = dev::warp::shfl_xor(x, 1);  // lanes 16..31 skip the collective
  dev::store_global(p.out + dev::linear_thread(), x);
}

TEST(SchedulerTest, WarpCollectiveNotReachedByAllLanesIsReported) {
  const emu::BugReport r = only_report(&shuffle_in_branch, 1, 64);
  EXPECT_EQ(r.kind, BugKind::kWarpDivergence);
  EXPECT_NE(r.detail.find("threads 0-15, 32-47 waiting at shfl.sync"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("threads 16-31, 48-63 exited"), std::string::npos) << r.detail;
}
ATTUNE_KERNEL void write_first(Buffers p) { dev::store_global(p.out, 1.0F); }

// Options::schedule_seed: blocks run in a seeded order (each block takes a
// ticket from a counter), every block once; without a seed, grid order.
TEST(SchedulerTest, ASeedRunsTheBlocksInAnotherOrder) {
  const auto tickets = [](std::uint64_t seed) {
    std::vector<i32> ticket(16, -1);
    i32 counter = 0;
    emu::Emulator emulator({.schedule_seed = seed});
    emulator.register_buffer("ticket", ticket.data(), ticket.size() * 4);
    emulator.register_buffer("counter", &counter, 4);
    emulator.launch({.grid = {4, 4, 1}, .block = {64, 1, 1}}, [&] {
      if (dev::thread_index().x == 0) {
        const i32 block = dev::block_index().x + 4 * dev::block_index().y;
        dev::store_global(ticket.data() + block, dev::atomic_fetch_add(&counter, 1));
      }
    });
    return ticket;
  };
  std::vector<i32> in_order(16);
  for (i32 i = 0; i < 16; ++i) in_order[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(tickets(0), in_order);
  const std::vector<i32> seeded = tickets(7);
  EXPECT_NE(seeded, in_order);
  EXPECT_TRUE(std::is_permutation(seeded.begin(), seeded.end(), in_order.begin()));
  EXPECT_EQ(tickets(7), seeded);  // the same seed, the same order
}

TEST(SchedulerTest, BadLaunchConfigurationIsRejected) {
  Fixture f(1, 1);
  EXPECT_THROW(f.emulator.launch(&write_first, {.grid = {1, 1, 1}, .block = {2048, 1, 1}}, f.params()),
               InvalidArgument);
  EXPECT_THROW(f.emulator.launch(&write_first, {.grid = {0, 1, 1}, .block = {32, 1, 1}}, f.params()), InvalidArgument);
}

}  // namespace
}  // namespace attune::emu_test
