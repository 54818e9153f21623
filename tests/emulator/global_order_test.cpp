// emulator/global_order.cpp and the resident units of scheduler.cpp: blocks
// ordered by global semaphores (a block waiting on one is set aside while
// others run), float reductions checked against the order semaphores give,
// and against plain reads and stores of the same words.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/tensor_map.h"
#include "templates/primitives/hopper.h"
#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

constexpr i32 kBlocks = 8;

// Each block adds its term to one float: terms whose sum depends on the
// order (1e8 absorbs the small ones unless they meet first).
float term(i32 block) {
  return block % 4 == 0 ? 1e8F * (block % 8 == 0 ? 1.0F : -1.0F) : 1.0F + 0.125F * static_cast<float>(block);
}

struct Ordered {
  float* sum;
  i32* semaphore;
  bool wait;     // false: the planted bug, no wait for the previous block
  bool ordered;  // ordered_atomic_add, else atomic_add
};

ATTUNE_KERNEL void add_in_block_order(Ordered p) {
  if (dev::thread_index().x != 0) return;
  const i32 block = dev::block_index().x;
  if (p.wait) dev::semaphore_wait(p.semaphore, block);
  if (p.ordered) {
    dev::ordered_atomic_add(p.sum, term(block));
  } else {
    dev::atomic_add(p.sum, term(block));
  }
  dev::semaphore_release(p.semaphore, 1);
}

struct Outcome {
  std::uint32_t bits = 0;
  std::string fault;  // empty: none
};

Outcome run_ordered(std::uint64_t seed, bool wait, bool ordered = true, std::size_t resident = 32) {
  float sum = 0;
  i32 semaphore = 0;
  emu::Emulator emulator({.schedule_seed = seed, .max_resident_units = resident});
  emulator.register_buffer("sum", &sum, sizeof sum);
  emulator.register_buffer("semaphore", &semaphore, sizeof semaphore);
  Outcome run;
  try {
    emulator.launch(&add_in_block_order, {.grid = {kBlocks, 1, 1}, .block = {32, 1, 1}},
                    Ordered{&sum, &semaphore, wait, ordered});
  } catch (const KernelFault& fault) {
    run.fault = fault.what();
  }
  run.bits = std::bit_cast<std::uint32_t>(sum);
  return run;
}

TEST(GlobalOrderTest, SemaphoreOrderedAddsGiveTheSameBitsUnderAnySchedule) {
  float expected = 0;
  for (i32 b = 0; b < kBlocks; ++b) expected += term(b);
  for (const std::uint64_t seed : {0, 1, 2, 3, 4}) {
    const Outcome run = run_ordered(seed, /*wait=*/true);
    EXPECT_EQ(run.fault, "") << "seed " << seed;
    EXPECT_EQ(run.bits, std::bit_cast<std::uint32_t>(expected)) << "seed " << seed;
  }
}

TEST(GlobalOrderTest, AMissingSemaphoreWaitChangesTheBitsAndIsReported) {
  std::set<std::uint32_t> sums;
  for (const std::uint64_t seed : {0, 1, 2, 3, 4, 5, 6, 7}) {
    const Outcome run = run_ordered(seed, /*wait=*/false);
    sums.insert(run.bits);
    EXPECT_NE(run.fault.find("ordered add to bytes [0, 4) of buffer 'sum'"), std::string::npos) << run.fault;
    EXPECT_NE(run.fault.find("a semaphore wait for that block's release is missing"), std::string::npos) << run.fault;
  }
  EXPECT_GT(sums.size(), 1U);  // the order shows in the bits
}

TEST(GlobalOrderTest, UnorderedAddsMayRaceEachOther) {
  // atomic_add claims no order: the same missing wait is not a report.
  EXPECT_EQ(run_ordered(3, /*wait=*/false, /*ordered=*/false).fault, "");
}

TEST(GlobalOrderTest, AWaitNoBlockReleasesIsAHangWithTheSemaphoreItWaitsOn) {
  i32 semaphore = 0;
  emu::Emulator emulator;
  emulator.register_buffer("semaphore", &semaphore, sizeof semaphore);
  try {
    emulator.launch({.grid = {2, 1, 1}, .block = {32, 1, 1}}, [&] { dev::semaphore_wait(&semaphore, 3); });
    ADD_FAILURE() << "the hang was not reported";
  } catch (const KernelFault& fault) {
    ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
    const emu::BugReport& r = fault.reports().front();
    EXPECT_EQ(r.kind, BugKind::kDeadlock);
    EXPECT_NE(r.detail.find("waiting on the semaphore at byte 0 of buffer 'semaphore' for at least 3 (it holds 0)"),
              std::string::npos)
        << r.detail;
    EXPECT_NE(r.detail.find("1 other block(s) resident"), std::string::npos) << r.detail;
  }
}

TEST(GlobalOrderTest, MoreBlocksWaitingAtOnceThanCanBeResidentIsAHang) {
  // In grid order block b waits for the b before it: one resident block
  // suffices. In reverse order, block 7 waits for all the others.
  EXPECT_EQ(run_ordered(0, true, true, /*resident=*/1).fault, "");
  std::string fault;
  for (std::uint64_t seed = 1; fault.empty() && seed < 8; ++seed) fault = run_ordered(seed, true, true, 2).fault;
  EXPECT_NE(fault.find("other block(s) resident, waiting on semaphores (at most 2 at once)"), std::string::npos)
      << fault;
}

struct Mixed {
  float* accumulator;
  i32* semaphore;
  bool store;  // block 1 stores, else reads, the word block 0 adds to
  bool wait;
};

ATTUNE_KERNEL void add_then_touch(Mixed p) {
  if (dev::thread_index().x != 0) return;
  if (dev::block_index().x == 0) {
    dev::atomic_add(p.accumulator, 1.0F);
    dev::semaphore_release(p.semaphore, 1);
    return;
  }
  if (p.wait) dev::semaphore_wait(p.semaphore, 1);
  if (p.store) {
    dev::store_global(p.accumulator, 0.0F);
  } else {
    dev::store_global(p.accumulator + 1, dev::load_global(p.accumulator));
  }
}

std::string run_mixed(bool store, bool wait) {
  float accumulator[2] = {0, 0};
  i32 semaphore = 0;
  emu::Emulator emulator;
  emulator.register_buffer("dq_accum", accumulator, sizeof accumulator);
  emulator.register_buffer("semaphore", &semaphore, sizeof semaphore);
  try {
    emulator.launch(&add_then_touch, {.grid = {2, 1, 1}, .block = {32, 1, 1}},
                    Mixed{accumulator, &semaphore, store, wait});
  } catch (const KernelFault& fault) {
    return fault.what();
  }
  return "";
}

TEST(GlobalOrderTest, APlainReadOrStoreRacingAnAddIsReported) {
  EXPECT_NE(run_mixed(/*store=*/false, /*wait=*/false)
                .find("read of bytes [0, 4) of buffer 'dq_accum' by block (1,0,0): block (0,0,0) of the same launch "
                      "added to byte 0, and nothing orders the two"),
            std::string::npos);
  EXPECT_NE(run_mixed(/*store=*/true, /*wait=*/false).find("store to bytes [0, 4) of buffer 'dq_accum'"),
            std::string::npos);
  // After the adder's release, both are ordered.
  EXPECT_EQ(run_mixed(false, true), "");
  EXPECT_EQ(run_mixed(true, true), "");
}

ATTUNE_KERNEL void store_then_add(Mixed p) {
  if (dev::thread_index().x != 0) return;
  if (dev::block_index().x == 0) {
    dev::store_global(p.accumulator, 2.0F);
  } else {
    dev::atomic_add(p.accumulator, 1.0F);
  }
}

TEST(GlobalOrderTest, AnAddAfterAnotherBlocksPlainStoreIsReported) {
  float accumulator[2] = {0, 0};
  Fixture f(1, 1);
  f.emulator.register_buffer("dq_accum", accumulator, sizeof accumulator);
  const KernelFault fault = expect_fault(&store_then_add, {.grid = {2, 1, 1}, .block = {32, 1, 1}},
                                         Mixed{accumulator, nullptr, false, false}, f.emulator);
  EXPECT_NE(std::string(fault.what()).find("block (0,0,0) of the same launch stored to byte 0 with a plain store"),
            std::string::npos)
      << fault.what();
}

// Two warps of one block add to one word in turn: warp 1 after warp 0's
// release (the semaphore orders threads of a block as it orders blocks).
struct Turns {
  float* sum;
  i32* semaphore;
  bool wait;
};

ATTUNE_KERNEL void two_warps_in_turn(Turns p) {
  dev::named_barrier::sync(1, 64);  // the block keeps vector clocks from here
  if (dev::lane_id() != 0) return;
  if (dev::warp_id() == 1 && p.wait) dev::semaphore_wait(p.semaphore, 1);
  dev::ordered_atomic_add(p.sum, 1.0F);
  if (dev::warp_id() == 0) dev::semaphore_release(p.semaphore, 1);
}

std::string run_turns(bool wait, std::uint64_t seed) {
  float sum = 0;
  i32 semaphore = 0;
  emu::Emulator emulator({.schedule_seed = seed});
  emulator.register_buffer("sum", &sum, sizeof sum);
  emulator.register_buffer("semaphore", &semaphore, sizeof semaphore);
  try {
    emulator.launch(&two_warps_in_turn, {.grid = {1, 1, 1}, .block = {64, 1, 1}}, Turns{&sum, &semaphore, wait});
  } catch (const KernelFault& fault) {
    return fault.what();
  }
  return "";
}

TEST(GlobalOrderTest, ThreadsOfOneBlockTakeTurnsThroughASemaphore) {
  for (const std::uint64_t seed : {0, 1, 2}) EXPECT_EQ(run_turns(/*wait=*/true, seed), "") << "seed " << seed;
  // Without the wait, the two adds are unordered whichever runs first.
  std::string fault;
  for (std::uint64_t seed = 0; fault.empty() && seed < 8; ++seed) fault = run_turns(/*wait=*/false, seed);
  EXPECT_NE(fault.find("of the same block does not happen before it"), std::string::npos) << fault;
}

// TMA bulk reductions (cp.reduce.async.bulk.tensor .add.f32): each block
// adds a box of 2 x 32 floats, all (block + 1), to one accumulator.
struct Bulk {
  TensorMap map;
  float* accumulator;
  i32* semaphore;
  i32 plant;  // 1: block 1 reads the accumulator plainly; 2: release after wait_read only
};

ATTUNE_KERNEL void bulk_add(Bulk p) {
  if (dev::thread_index().x != 0) return;
  const i32 block = dev::block_index().x;
  float* box = dev::shared_memory<float>();
  for (i32 i = 0; i < 64; ++i) dev::store_shared(box + i, static_cast<float>(block + 1));
  dev::fence_proxy_async();
  if (p.plant == 1 && block == 1) static_cast<void>(dev::load_global(p.accumulator));
  dev::tma::reduce_add(&p.map, box, 0, 0, 0);
  dev::tma::commit();
  if (p.plant == 2) {
    dev::tma::wait_read<0>();
    dev::semaphore_release(p.semaphore, 1);  // planted: the reduction may not be complete
  }
  dev::tma::wait<0>();
}

std::string run_bulk(i32 plant, bool fp32, std::vector<float>* accumulator) {
  accumulator->assign(64, 0.0F);
  i32 semaphore = 0;
  TensorMapSpec spec{.address = accumulator->data(),
                     .rank = 3,
                     .element_bytes = 4,
                     .dims = {32, 1, 2, 0, 0},
                     .strides = {128, 128, 0, 0},
                     .box = {32, 1, 2, 1, 1}};
  spec.fp32 = fp32;
  emu::Emulator emulator;
  emulator.register_buffer("dq_accum", accumulator->data(), accumulator->size() * sizeof(float));
  emulator.register_buffer("semaphore", &semaphore, sizeof semaphore);
  try {
    emulator.launch(&bulk_add, {.grid = {3, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 256},
                    Bulk{encode_emulated_tensor_map(spec), accumulator->data(), &semaphore, plant});
  } catch (const KernelFault& fault) {
    return fault.what();
  }
  return "";
}

TEST(GlobalOrderTest, TmaBulkReductionsAddAndAreCheckedLikeAtomics) {
  std::vector<float> accumulator;
  EXPECT_EQ(run_bulk(0, true, &accumulator), "");
  EXPECT_EQ(accumulator, std::vector<float>(64, 6.0F));  // 1 + 2 + 3
  // A plain read of what another block's bulk reduction added, unordered.
  EXPECT_NE(run_bulk(1, true, &accumulator).find("read of bytes [0, 4) of buffer 'dq_accum' by block (1,0,0)"),
            std::string::npos);
  // .add.f32 needs a map of fp32 elements.
  EXPECT_NE(run_bulk(0, false, &accumulator).find("TMA reduce-add through a map of 4-byte elements that are not fp32"),
            std::string::npos);
  // A release covers a bulk reduction only after wait_group (not .read).
  EXPECT_NE(run_bulk(2, true, &accumulator).find("while this thread's TMA stores or reductions may still be in flight"),
            std::string::npos);
}

}  // namespace
}  // namespace attune::emu_test
