// mbarriers, named barriers and elect.sync on the emulator: a producer
// warpgroup hands rounds of data to two consumer warpgroups through a ring
// of full/empty mbarriers (parities flipping each lap, the first empty wait
// on the virtual phase before the first), the consumers hand off inside
// their warpgroup through a named barrier; it runs with no report. Each
// misuse the ISA leaves undefined is planted once and reported at its line,
// and a deadlock is reported with every barrier's state instead of hanging.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "templates/primitives/hopper.h"
#include "tests/emulator/planted_bug.h"
#include "tests/emulator/planted_report.h"

namespace attune {
namespace {

using emu::BugKind;

enum Plant : i32 {
  kNone = 0,
  kUseBeforeInit,
  kDoubleInit,
  kParityNotFlipped,
  kNoConsumerRelease,
  kProducerSkipsTheEmptyWait,
  kNamedBarrierCountsDiffer,
};

struct RingParams {
  const float* in;  // [kRounds]
  float* out;       // [2][384]: per block, each consumer's sum
  i32 plant;
};

constexpr i32 kStages = 2;
constexpr i32 kRounds = 5;
constexpr i64 kSharedBytes = 2 * kStages * 8 + 16 * kRounds;

// Shared memory: full[kStages], empty[kStages] (8 bytes each), then the
// staged values (global loads here: only the hand-off is under test).
ATTUNE_KERNEL void ring(RingParams p) {
  u64* full = dev::shared_memory<u64>();
  u64* empty = full + kStages;
  const i32 t = dev::linear_thread();
  if (t == 0) {
    for (i32 s = 0; s < kStages; ++s) {
      if (p.plant != kUseBeforeInit) dev::mbarrier::init(full + s, 1);
      dev::mbarrier::init(empty + s, 2);  // one elected thread per consumer warpgroup
    }
    if (p.plant == kDoubleInit) dev::mbarrier::init(empty, 2);  // planted: initialised twice
    dev::mbarrier::fence_init();
  }
  dev::block::sync();
  if (dev::warpgroup::index() == 0) {
    if (dev::warp_id() == 0 && dev::elect_one()) {
      for (i32 r = 0; r < kRounds; ++r) {
        const i32 s = r % kStages;
        // The first lap waits on the phase before the first (parity 1): free.
        if (p.plant != kProducerSkipsTheEmptyWait) dev::mbarrier::wait(empty + s, ((r / kStages) & 1) ^ 1);
        dev::mbarrier::arrive(full + s);  // producer: arrive
      }
    }
    return;
  }
  float sum = 0.0f;
  for (i32 r = 0; r < kRounds; ++r) {
    const i32 s = r % kStages;
    const u32 parity = p.plant == kParityNotFlipped ? 0 : (r / kStages) & 1;
    dev::mbarrier::wait(full + s, parity);  // consumer: wait full
    sum += dev::load_global(p.in + r);
    const i32 count = p.plant == kNamedBarrierCountsDiffer && dev::warp_id() == 11 ? 96 : 128;
    dev::named_barrier::sync(dev::warpgroup::index(), count);  // consumer: hand-off
    if (dev::warpgroup::thread() < 32 && dev::elect_one() && p.plant != kNoConsumerRelease) {
      dev::mbarrier::arrive(empty + s);
    }
  }
  dev::store_global(p.out + dev::block_index().x * 384 + t, sum);
}

struct Ring {
  std::vector<float> in = std::vector<float>(kRounds);
  std::vector<float> out = std::vector<float>(2 * 384, -1.0F);
  emu::Emulator emulator;
  Ring() {
    for (i32 r = 0; r < kRounds; ++r) in[static_cast<std::size_t>(r)] = static_cast<float>(10 * (r + 1));
    emulator.register_buffer("in", in.data(), in.size() * 4);
    emulator.register_buffer("out", out.data(), out.size() * 4);
  }
  void run(i32 plant) {
    emulator.launch(&ring, LaunchConfig{{2, 1, 1}, {384, 1, 1}, kSharedBytes},
                    RingParams{in.data(), out.data(), plant});
  }
};

TEST(MbarrierEmuTest, ARingOfFullAndEmptyBarriersHandsEveryRoundOverWithNoReport) {
  Ring ring;
  ring.run(kNone);
  for (int b = 0; b < 2; ++b) {
    for (int t = 128; t < 384; ++t) {
      EXPECT_EQ(ring.out[static_cast<std::size_t>(b * 384 + t)], 150.0F) << "block " << b << " thread " << t;
    }
  }
}

using Planted = testing::PlantedBug;

class MbarrierPlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(MbarrierPlantedBugTest, IsReportedWithItsKindAtItsLine) {
  const Planted& p = GetParam();
  Ring ring;
  testing::expect_planted_bug_reported(p, "barriers_test.cpp", [&] { ring.run(p.plant); });
}

INSTANTIATE_TEST_SUITE_P(
    Detectors, MbarrierPlantedBugTest,
    ::testing::Values(Planted{kUseBeforeInit, BugKind::kMbarrierMisuse, "consumer: wait full", "before mbarrier::init",
                              "UseBeforeInit"},
                      Planted{kDoubleInit, BugKind::kMbarrierMisuse, "planted: initialised twice",
                              "initialised already", "DoubleInit"},
                      Planted{kParityNotFlipped, BugKind::kMbarrierMisuse, "consumer: wait full",
                              "saw complete already: it returns at once", "ParityNotFlipped"},
                      // Nobody frees a stage: the producer waits for ever on the second lap.
                      Planted{kNoConsumerRelease, BugKind::kDeadlock, "consumer: wait full", "2 of 2 arrivals pending",
                              "NoConsumerRelease"},
                      Planted{kProducerSkipsTheEmptyWait, BugKind::kMbarrierMisuse, "producer: arrive",
                              "completed with no thread waiting for it", "ProducerSkipsTheEmptyWait"},
                      Planted{kNamedBarrierCountsDiffer, BugKind::kBarrierDivergence, "consumer: hand-off",
                              "already there expect", "NamedBarrierCountsDiffer"}),
    testing::planted_bug_name);

}  // namespace
}  // namespace attune
