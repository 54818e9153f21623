// emulator/memory_checks.cpp: races between barriers, global bounds against
// the registered buffers, shared bounds; each against a planted bug it must
// report (kind, coordinates, bytes, buffer) and the corrected kernel that
// must run clean.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

// --- a shared-memory tree reduction, with and without its barrier ----------

template <bool kBarrierInLoop>
ATTUNE_KERNEL void tree_reduce(Buffers p) {
  float* s = dev::shared_memory<float>();
  const i32 t = dev::thread_index().x;
  dev::store_shared(s + t, dev::load_global(p.in + t));
  dev::block::sync();
  for (i32 stride = dev::block_dim().x / 2; stride > 0; stride /= 2) {
    if (t < stride) dev::store_shared(s + t, dev::load_shared(s + t) + dev::load_shared(s + t + stride));
    if constexpr (kBarrierInLoop) dev::block::sync();
  }
  if constexpr (!kBarrierInLoop) dev::block::sync();
  if (t == 0) dev::store_global(p.out, dev::load_shared(s));
}

constexpr LaunchConfig kOneBlock128 = {.grid = {1, 1, 1}, .block = {128, 1, 1}, .dynamic_shared_bytes = 512};

TEST(MemoryChecksTest, CorrectReductionRunsClean) {
  Fixture f(128, 1);
  f.emulator.launch(&tree_reduce<true>, kOneBlock128, f.params());
  EXPECT_EQ(f.out[0], 127.0F * 128.0F / 2.0F);
}

TEST(MemoryChecksTest, MissingBarrierInReductionIsARace) {
  Fixture f(128, 1);
  const KernelFault fault = expect_fault(&tree_reduce<false>, kOneBlock128, f.params(), f.emulator);
  ASSERT_FALSE(fault.reports().empty());
  const emu::BugReport& first = fault.reports().front();
  EXPECT_EQ(first.kind, BugKind::kSharedRace) << fault.what();
  // Threads run in order: thread 0 runs every stride and last reads s[1]
  // (stride 1); thread 1 then writes s[1] (stride 64) with no barrier between.
  EXPECT_EQ(first.thread.x, 1) << first.to_string();
  EXPECT_EQ(first.block.x, 0);
  EXPECT_NE(first.detail.find("write of shared bytes [4, 8)"), std::string::npos) << first.detail;
  EXPECT_NE(first.detail.find("thread (0,0,0)"), std::string::npos) << first.detail;
  EXPECT_NE(first.site.find("memory_checks_test.cpp"), std::string::npos) << first.site;
}

// --- tile loads at the edge of a buffer -----------------------------------

template <bool kGuarded>
ATTUNE_KERNEL void tile_copy(Buffers p) {
  const i32 tile = dev::block_index().x;
  const i32 t = dev::thread_index().x;
  const i32 i = tile * dev::block_dim().x + t;
  // The buggy version forgets that the last tile is partial (n = 127).
  if (!kGuarded || i < p.n) dev::store_global(p.out + i, 2.0F * dev::load_global(p.in + i));
}

TEST(MemoryChecksTest, GuardedTileLoadRunsClean) {
  Fixture f(127, 128);
  f.emulator.launch(&tile_copy<true>, {.grid = {2, 1, 1}, .block = {64, 1, 1}}, f.params());
  EXPECT_EQ(f.out[126], 252.0F);
}

TEST(MemoryChecksTest, OffByOneTileLoadIsOutOfBounds) {
  Fixture f(127, 128);
  const KernelFault fault =
      expect_fault(&tile_copy<false>, {.grid = {2, 1, 1}, .block = {64, 1, 1}}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  const emu::BugReport& r = fault.reports().front();
  EXPECT_EQ(r.kind, BugKind::kGlobalOutOfBounds);
  EXPECT_EQ(r.block.x, 1);
  EXPECT_EQ(r.thread.x, 63);
  EXPECT_NE(r.detail.find("read of bytes [508, 512) of buffer 'in', which has 508 bytes"), std::string::npos)
      << r.detail;
}

ATTUNE_KERNEL void shared_overflow(Buffers p) {
  float* s = dev::shared_memory<float>();
  const i32 t = dev::thread_index().x;
  dev::store_shared(s + t + 1, 1.0F);  // one past the end for the last thread
  dev::block::sync();
  if (t == 0) dev::store_global(p.out, dev::load_shared(s + 1));
}

TEST(MemoryChecksTest, SharedAccessBeyondDynamicSizeIsReported) {
  Fixture f(1, 1);
  const KernelFault fault = expect_fault(
      &shared_overflow, {.grid = {1, 1, 1}, .block = {64, 1, 1}, .dynamic_shared_bytes = 256}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kSharedOutOfBounds);
  EXPECT_EQ(fault.reports()[0].thread.x, 63);
  EXPECT_NE(fault.reports()[0].detail.find("[256, 260)"), std::string::npos) << fault.reports()[0].detail;
}

ATTUNE_KERNEL void unregistered_write(Buffers p) {
  dev::store_global(p.out + 1000, 1.0F);  // far past 'out'
}

TEST(MemoryChecksTest, AccessFarPastABufferIsReported) {
  // 'out' is the first 4 floats of a larger allocation, and the only buffer
  // registered: the nearest one below the write whatever the heap's layout.
  std::vector<float> storage(2000, 0.0F);
  emu::Emulator emulator;
  emulator.register_buffer("out", storage.data(), 4 * sizeof(float));
  const KernelFault fault = expect_fault(&unregistered_write, {.grid = {1, 1, 1}, .block = {1, 1, 1}},
                                         Buffers{nullptr, storage.data(), 0}, emulator);
  ASSERT_EQ(fault.reports().size(), 1U);
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kGlobalOutOfBounds);
  EXPECT_NE(std::string(fault.what()).find("write of bytes [4000, 4004) of buffer 'out', which has 16 bytes"),
            std::string::npos)
      << fault.what();
}

}  // namespace
}  // namespace attune::emu_test
