// emulator/memory_checks.cpp: races between barriers and across mbarrier
// and named-barrier hand-offs, global bounds against the registered buffers,
// shared bounds, global bytes two blocks write; each against a planted bug it
// must report (kind, coordinates, bytes, buffer) and the corrected kernel
// that must run clean.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/tensor_map.h"
#include "emulator/global_writes.h"
#include "templates/primitives/hopper.h"
#include "tests/emulator/emu_fixture.h"
#include "tests/emulator/planted_bug.h"
#include "tests/emulator/planted_report.h"
#include "tests/support/swizzled_tile_map.h"

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

// An atomic is bounds-checked like a store: an out-of-bounds one is
// reported and does nothing.
struct CounterParams {
  i32* counter;
};

ATTUNE_KERNEL void ticket_past_the_end(CounterParams p) { dev::atomic_fetch_add(p.counter + 1, 1); }

TEST(MemoryChecksTest, AtomicFetchAddOutsideItsBufferIsReported) {
  std::vector<i32> storage(4, 0);
  emu::Emulator emulator;
  emulator.register_buffer("counter", storage.data(), sizeof(i32));
  const KernelFault fault = expect_fault(&ticket_past_the_end, {.grid = {1, 1, 1}, .block = {1, 1, 1}},
                                         CounterParams{storage.data()}, emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kGlobalOutOfBounds);
  EXPECT_NE(fault.reports()[0].detail.find("write of bytes [4, 8) of buffer 'counter', which has 4 bytes"),
            std::string::npos)
      << fault.reports()[0].detail;
  EXPECT_EQ(storage[1], 0);
}

// --- happens-before through mbarriers and named barriers --------------------
//
// Thread 0 writes a shared word and hands it to 256 consumer threads (warps
// 1-8) through the mbarrier `full`; they hand it back through `empty` (one
// arrival each) and thread 0 overwrites it. No block barrier orders the
// word's accesses: only the mbarriers' happens-before does.

enum HandOffPlant : i32 {
  kOrdered = 0,
  kReadWithoutWait,        // the consumers read without waiting on `full`
  kOverwriteWithoutWait,   // the producer overwrites without waiting on `empty`
  kReleaseBeforeRead,      // the consumers arrive on `empty` before they read
  kOnlyLastWarpReleases,   // `empty` counts the last consumer warp only: the others' reads are unordered
  kNamedArriveBeforeWrite  // named barrier: the producer arrives, then writes
};

struct HandOffParams {
  i32* out;  // [288]: what each consumer read
  i32 plant;
};

constexpr i32 kConsumers = 256;
constexpr LaunchConfig kProducerAndConsumers = {
    .grid = {1, 1, 1}, .block = {32 + kConsumers, 1, 1}, .dynamic_shared_bytes = 32};

ATTUNE_KERNEL void mbarrier_hand_off(HandOffParams p) {
  u64* full = dev::shared_memory<u64>();
  u64* empty = full + 1;
  i32* word = dev::shared_as<i32>(full + 2);
  const i32 t = dev::linear_thread();
  if (t == 0) {
    dev::mbarrier::init(full, 1);
    dev::mbarrier::init(empty, p.plant == kOnlyLastWarpReleases ? 32 : kConsumers);
    dev::mbarrier::fence_init();
  }
  dev::block::sync();
  if (t == 0) {
    dev::store_shared(word, 42);
    dev::mbarrier::arrive(full);
    if (p.plant != kOverwriteWithoutWait) dev::mbarrier::wait(empty, 0);
    dev::store_shared(word, 43);  // producer: overwrite
  } else if (t >= 32) {
    if (p.plant != kReadWithoutWait) dev::mbarrier::wait(full, 0);
    if (p.plant == kReleaseBeforeRead) dev::mbarrier::arrive(empty);
    const i32 value = dev::load_shared(word);  // consumer: read
    if (p.plant != kReleaseBeforeRead && (p.plant != kOnlyLastWarpReleases || t >= kConsumers)) {
      dev::mbarrier::arrive(empty);
    }
    dev::store_global(p.out + t, value);
  }
}

// The same hand-off through named barrier 1: warp 0 arrives (bar.arrive),
// the consumers sync (bar.sync). The word is written before the block's
// first barrier of any kind, while no clocks are kept yet.
ATTUNE_KERNEL void named_barrier_hand_off(HandOffParams p) {
  i32* word = dev::shared_memory<i32>();
  const i32 t = dev::linear_thread();
  if (t < 32) {
    if (t == 0 && p.plant != kNamedArriveBeforeWrite) dev::store_shared(word, 42);
    dev::named_barrier::arrive(1, 32 + kConsumers);
    if (t == 0 && p.plant == kNamedArriveBeforeWrite) dev::store_shared(word, 42);  // planted: after the arrive
  } else {
    dev::named_barrier::sync(1, 32 + kConsumers);
    dev::store_global(p.out + t, dev::load_shared(word));  // consumer: read after the named barrier
  }
}

struct HandOff {
  std::vector<i32> out = std::vector<i32>(32 + kConsumers, 0);
  emu::Emulator emulator;
  HandOff() { emulator.register_buffer("out", out.data(), out.size() * sizeof(i32)); }
  void run(void (*kernel)(HandOffParams), i32 plant) {
    emulator.launch(kernel, kProducerAndConsumers, HandOffParams{out.data(), plant});
  }
};

TEST(SharedHappensBeforeTest, AWordHandedOverThroughAnMbarrierAndBackIsNoRace) {
  HandOff h;
  h.run(&mbarrier_hand_off, kOrdered);
  for (i32 t = 32; t < 32 + kConsumers; ++t) EXPECT_EQ(h.out[static_cast<std::size_t>(t)], 42) << "thread " << t;
}

TEST(SharedHappensBeforeTest, AWordHandedOverThroughANamedBarrierIsNoRace) {
  HandOff h;
  h.run(&named_barrier_hand_off, kOrdered);
  for (i32 t = 32; t < 32 + kConsumers; ++t) EXPECT_EQ(h.out[static_cast<std::size_t>(t)], 42) << "thread " << t;
}

// Without mbarriers or named barriers nothing changes: the same reads of
// another thread's write are a race until a block barrier.
ATTUNE_KERNEL void read_after_write_no_barrier(HandOffParams p) {
  i32* word = dev::shared_memory<i32>();
  const i32 t = dev::linear_thread();
  if (t == 0) dev::store_shared(word, 42);
  if (t >= 32) dev::store_global(p.out + t, dev::load_shared(word));
}

TEST(SharedHappensBeforeTest, WithoutClocksOnlyABlockBarrierOrders) {
  HandOff h;
  const KernelFault fault =
      expect_fault(&read_after_write_no_barrier, kProducerAndConsumers, HandOffParams{h.out.data(), 0}, h.emulator);
  EXPECT_EQ(fault.reports().front().kind, BugKind::kSharedRace) << fault.what();
  EXPECT_NE(fault.reports().front().detail.find("since the last barrier"), std::string::npos) << fault.what();
}

using testing::PlantedBug;

class SharedHappensBeforePlantedTest : public ::testing::TestWithParam<PlantedBug> {};

TEST_P(SharedHappensBeforePlantedTest, IsReportedAtItsLine) {
  const PlantedBug& p = GetParam();
  HandOff h;
  testing::expect_planted_bug_reported(p, "memory_checks_test.cpp", [&] {
    h.run(p.plant == kNamedArriveBeforeWrite ? &named_barrier_hand_off : &mbarrier_hand_off, p.plant);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Detectors, SharedHappensBeforePlantedTest,
    ::testing::Values(
        PlantedBug{kReadWithoutWait, BugKind::kSharedRace, "consumer: read",
                   "races with a write of byte 16 by thread (0,0,0) with no happens-before", "ReadWithoutWait"},
        PlantedBug{kOverwriteWithoutWait, BugKind::kSharedRace, "consumer: read",
                   "races with a write of byte 16 by thread (0,0,0)", "OverwriteWithoutWait"},
        // Write after read: the overwrite is not ordered after the reads.
        PlantedBug{kReleaseBeforeRead, BugKind::kSharedRace, "producer: overwrite",
                   "write of shared bytes [16, 20) races with a read of byte 16 by thread", "ReleaseBeforeRead"},
        // The newest read happens before the overwrite, the first one does not.
        PlantedBug{kOnlyLastWarpReleases, BugKind::kSharedRace, "producer: overwrite",
                   "races with a read of byte 16 by thread (32,0,0)", "OnlyLastWarpReleases"},
        PlantedBug{kNamedArriveBeforeWrite, BugKind::kSharedRace, "consumer: read after the named barrier",
                   "races with a write of byte 0 by thread (0,0,0)", "NamedArriveBeforeWrite"}),
    testing::planted_bug_name);

// --- global bytes written by two blocks of one launch -----------------------

struct SliceParams {
  float* out;  // a slice of block_dim floats per block, blocks in x-fastest order
  i32 plant;   // 1: block (0,1,0) also writes the slice of block (1,0,0)
};

ATTUNE_KERNEL void slices(SliceParams p) {
  const Dim3 b = dev::block_index();
  const i32 n = dev::block_dim().x;
  const i32 t = dev::thread_index().x;
  const i32 block = b.x + dev::grid_dim().x * b.y;
  dev::store_global(p.out + block * n + t, static_cast<float>(block));
  if (p.plant == 1 && b.x == 0 && b.y == 1) dev::store_global(p.out + n + t, -1.0F);  // planted: another block's slice
  // Atomics are not writes of a block: every block adds to the last element.
  dev::atomic_add(p.out + dev::grid_dim().x * dev::grid_dim().y * n, 1.0F);
}

constexpr LaunchConfig kFourBlocks = {.grid = {2, 2, 1}, .block = {64, 1, 1}};

TEST(GlobalRaceTest, BlocksWritingTheirOwnSlicesRunClean) {
  Fixture f(1, 4 * 64 + 1);
  f.emulator.launch(&slices, kFourBlocks, SliceParams{f.out.data(), 0});
  EXPECT_EQ(f.out[64], 1.0F);
  EXPECT_EQ(f.out[4 * 64], 4.0F * 64.0F);
}

TEST(GlobalRaceTest, ABlockWritingAnotherBlocksSliceIsReportedWithBothBlocks) {
  Fixture f(1, 4 * 64 + 1);
  const KernelFault fault = expect_fault(&slices, kFourBlocks, SliceParams{f.out.data(), 1}, f.emulator);
  testing::expect_reported(fault, BugKind::kGlobalRace, "memory_checks_test.cpp", "planted: another block's slice",
                           "write of bytes [256, 260) of buffer 'out' by block (0,1,0): byte 256 was written by "
                           "block (1,0,0) of the same launch");
  for (const emu::BugReport& r : fault.reports()) {
    EXPECT_EQ(r.kind, BugKind::kGlobalRace) << r.to_string();
    EXPECT_EQ(r.block.x, 0);
    EXPECT_EQ(r.block.y, 1);
  }
  EXPECT_EQ(fault.reports().front().thread.x, 0);
}

// Write records belong to their launch: a later launch whose blocks write
// bytes an earlier launch's other blocks wrote is clean, also once the
// launch tags have come round again.
struct RangeParams {
  float* out;
  i32 block;  // the one block that writes
  i32 first;  // out[first, first + count)
  i32 count;
};

ATTUNE_KERNEL void one_block_writes(RangeParams p) {
  if (dev::block_index().x != p.block) return;
  for (i32 i = dev::thread_index().x; i < p.count; i += dev::block_dim().x) {
    dev::store_global(p.out + p.first + i, 1.0F);
  }
}

TEST(GlobalRaceTest, EachLaunchStartsWithNoWrites) {
  constexpr i32 kLaunches = static_cast<i32>(emu::GlobalWrites::kLaunchTags) + 2;
  Fixture f(1, kLaunches);
  const LaunchConfig two_blocks = {.grid = {2, 1, 1}, .block = {32, 1, 1}};
  f.emulator.launch(&one_block_writes, two_blocks, RangeParams{f.out.data(), 1, 0, kLaunches});
  // Each launch writes one element block 1 wrote in the first: one of them
  // has the first one's tag again, whatever the period of the tags.
  for (i32 k = 0; k < kLaunches; ++k) {
    f.emulator.launch(&one_block_writes, two_blocks, RangeParams{f.out.data(), 0, k, 1});
  }
  EXPECT_EQ(f.out[static_cast<std::size_t>(kLaunches - 1)], 1.0F);
}

// TMA stores are writes of their block: each block stores its 8 rows of a
// 16 x 64 tensor, or (planted) both store rows 0-7.
struct TmaSliceParams {
  TensorMap map;
  i32 plant;
};

ATTUNE_KERNEL void tma_slices(TmaSliceParams p) {
  u16* tile = dev::shared_memory<u16>();
  const i32 t = dev::thread_index().x;
  for (i32 i = t; i < 8 * 64; i += dev::block_dim().x) dev::store_shared(tile + i, static_cast<u16>(i));
  dev::fence_proxy_async();
  dev::block::sync();
  if (t == 0) {
    const i32 row0 = p.plant == 1 ? 0 : 8 * dev::block_index().x;
    dev::tma::store(&p.map, tile, 0, row0);  // tma: store the block's rows
    dev::tma::commit();
    dev::tma::wait_read<0>();
  }
}

TEST(GlobalRaceTest, TmaStoresOfTwoBlocksToTheSameRowsAreReported) {
  std::vector<u16> tensor(16 * 64, 0);
  emu::Emulator emulator;
  emulator.register_buffer("tensor", tensor.data(), tensor.size() * sizeof(u16));
  const TensorMap map = encode_emulated_tensor_map(testing::swizzled_tile_map(tensor.data(), 16, 8));
  const LaunchConfig two_blocks = {.grid = {2, 1, 1}, .block = {128, 1, 1}, .dynamic_shared_bytes = 1024};
  emulator.launch(&tma_slices, two_blocks, TmaSliceParams{map, 0});
  const KernelFault fault = expect_fault(&tma_slices, two_blocks, TmaSliceParams{map, 1}, emulator);
  testing::expect_reported(fault, BugKind::kGlobalRace, "memory_checks_test.cpp", "tma: store the block's rows",
                           "of buffer 'tensor' by block (1,0,0): byte 0 was written by block (0,0,0)");
}

}  // namespace
}  // namespace attune::emu_test
