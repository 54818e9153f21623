// Each detector of the emulator against a planted bug it must report (kind,
// block and thread coordinates, buffer or address), and the corrected kernel
// it must run without a single report.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "templates/primitives/primitives.h"

namespace attune {
namespace {

using emu::BugKind;
using emu::KernelFault;

struct Buffers {
  const float* in;
  float* out;
  i32 n;
};

// Runs a launch expected to fail and returns its fault.
template <class Params>
KernelFault expect_fault(void (*kernel)(Params), const LaunchConfig& config, const Params& params,
                         emu::Emulator& emulator) {
  try {
    emulator.launch(kernel, config, params);
  } catch (const KernelFault& fault) {
    return fault;
  }
  ADD_FAILURE() << "the planted bug was not reported";
  return KernelFault({}, 0);
}

struct Fixture {
  std::vector<float> in;
  std::vector<float> out;
  emu::Emulator emulator;
  explicit Fixture(std::size_t in_size, std::size_t out_size) : in(in_size), out(out_size, 0.0F) {
    std::iota(in.begin(), in.end(), 0.0F);
    emulator.register_buffer("in", in.data(), in.size() * sizeof(float));
    emulator.register_buffer("out", out.data(), out.size() * sizeof(float));
  }
  Buffers params() { return {in.data(), out.data(), static_cast<i32>(in.size())}; }
};

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

TEST(DetectorsTest, CorrectReductionRunsClean) {
  Fixture f(128, 1);
  f.emulator.launch(&tree_reduce<true>, kOneBlock128, f.params());
  EXPECT_EQ(f.out[0], 127.0F * 128.0F / 2.0F);
}

TEST(DetectorsTest, MissingBarrierInReductionIsARace) {
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
  EXPECT_NE(first.site.find("detectors_test.cpp"), std::string::npos) << first.site;
}

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

TEST(DetectorsTest, CorrectPipelineRunsClean) {
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

TEST(DetectorsTest, WaitGroupOneWhereZeroIsNeededIsReported) {
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

// --- tile loads at the edge of a buffer -----------------------------------

template <bool kGuarded>
ATTUNE_KERNEL void tile_copy(Buffers p) {
  const i32 tile = dev::block_index().x;
  const i32 t = dev::thread_index().x;
  const i32 i = tile * dev::block_dim().x + t;
  // The buggy version forgets that the last tile is partial (n = 127).
  if (!kGuarded || i < p.n) dev::store_global(p.out + i, 2.0F * dev::load_global(p.in + i));
}

TEST(DetectorsTest, GuardedTileLoadRunsClean) {
  Fixture f(127, 128);
  f.emulator.launch(&tile_copy<true>, {.grid = {2, 1, 1}, .block = {64, 1, 1}}, f.params());
  EXPECT_EQ(f.out[126], 252.0F);
}

TEST(DetectorsTest, OffByOneTileLoadIsOutOfBounds) {
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

TEST(DetectorsTest, SharedAccessBeyondDynamicSizeIsReported) {
  Fixture f(1, 1);
  const KernelFault fault = expect_fault(
      &shared_overflow, {.grid = {1, 1, 1}, .block = {64, 1, 1}, .dynamic_shared_bytes = 256}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kSharedOutOfBounds);
  EXPECT_EQ(fault.reports()[0].thread.x, 63);
  EXPECT_NE(fault.reports()[0].detail.find("[256, 260)"), std::string::npos) << fault.reports()[0].detail;
}

// --- barriers and warp collectives in divergent code ----------------------

ATTUNE_KERNEL void barrier_in_branch(Buffers p) {
  const i32 t = dev::thread_index().x;
  if (t < 64) {
    dev::store_global(p.out + t, 1.0F);
    dev::block::sync();  // threads 64..127 never get here
  }
}

TEST(DetectorsTest, BarrierInDivergentBranchIsReportedNotAHang) {
  Fixture f(1, 128);
  const KernelFault fault =
      expect_fault(&barrier_in_branch, {.grid = {3, 1, 1}, .block = {128, 1, 1}}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  const emu::BugReport& r = fault.reports().front();
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

TEST(DetectorsTest, DifferentBarriersInTwoBranchesAreReported) {
  Fixture f(1, 64);
  const KernelFault fault =
      expect_fault(&barriers_at_two_sites, {.grid = {1, 1, 1}, .block = {64, 1, 1}}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kBarrierDivergence);
}

ATTUNE_KERNEL void shuffle_in_branch(Buffers p) {
  const i32 lane = dev::lane_id();
  float x = static_cast<float>(lane);
  if (lane < 16) x = dev::warp::shfl_xor(x, 1);  // lanes 16..31 skip the collective
  dev::store_global(p.out + dev::linear_thread(), x);
}

TEST(DetectorsTest, WarpCollectiveNotReachedByAllLanesIsReported) {
  Fixture f(1, 64);
  const KernelFault fault =
      expect_fault(&shuffle_in_branch, {.grid = {1, 1, 1}, .block = {64, 1, 1}}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  const emu::BugReport& r = fault.reports().front();
  EXPECT_EQ(r.kind, BugKind::kWarpDivergence);
  EXPECT_NE(r.detail.find("threads 0-15, 32-47 waiting at shfl.sync"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("threads 16-31, 48-63 exited"), std::string::npos) << r.detail;
}

ATTUNE_KERNEL void unregistered_write(Buffers p) {
  dev::store_global(p.out + 1000, 1.0F);  // far past 'out'
}

TEST(DetectorsTest, AccessFarPastABufferIsReported) {
  Fixture f(1, 4);
  const KernelFault fault =
      expect_fault(&unregistered_write, {.grid = {1, 1, 1}, .block = {1, 1, 1}}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U);
  EXPECT_EQ(fault.reports()[0].kind, BugKind::kGlobalOutOfBounds);
  EXPECT_NE(std::string(fault.what()).find("write of bytes [4000, 4004) of buffer 'out', which has 16 bytes"),
            std::string::npos)
      << fault.what();
}

TEST(DetectorsTest, BadLaunchConfigurationIsRejected) {
  Fixture f(1, 1);
  EXPECT_THROW(f.emulator.launch(&unregistered_write, {.grid = {1, 1, 1}, .block = {2048, 1, 1}}, f.params()),
               InvalidArgument);
  EXPECT_THROW(f.emulator.launch(&unregistered_write, {.grid = {0, 1, 1}, .block = {32, 1, 1}}, f.params()),
               InvalidArgument);
}

}  // namespace
}  // namespace attune
