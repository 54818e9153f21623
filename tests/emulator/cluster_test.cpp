// Thread block clusters on the emulator: the blocks of a cluster run
// together, each with its own shared memory. Two blocks share a ring of
// stages: each producer multicasts half of every tile into both blocks
// (tma::load_multicast), each block's full barrier expects the whole tile,
// and each consumer releases the stage in both blocks
// (mbarrier::arrive_cluster), so a stage is refilled only once both have
// read it. It runs with no report; each misuse of a cluster is planted once
// and reported at its line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/tensor_map.h"
#include "emulator/emulator.h"
#include "templates/primitives/hopper.h"
#include "tests/emulator/planted_bug.h"
#include "tests/emulator/planted_report.h"

namespace attune {
namespace {

using emu::BugKind;

enum Plant : i32 {
  kNone = 0,
  kBlockSyncAfterInit,  // the peer's barriers used before their init is visible to it
  kNoClusterSyncAtExit,
  kExpectOwnHalf,
  kMaskPastTheCluster,
  kPeerByPointer,
  kReleaseOwnBlockTwice,  // the peer's producer refills a stage this block still reads
};

constexpr i32 kCols = 32;  // floats per row
constexpr i32 kTileRows = 16;
constexpr i32 kStages = 2;
constexpr i32 kRounds = 5;
constexpr i32 kTileBytes = kTileRows * kCols * 4;
constexpr i32 kTileOffset = 1024;
constexpr i64 kSharedBytes = kTileOffset + kStages * kTileBytes;

struct ClusterParams {
  TensorMap rows;  // [kRounds * kTileRows, kCols] floats, box [half a tile's rows, kCols]
  float* out;      // [blocks][128]: each consumer thread's sum
  i32 plant;
};

// Block threads: a producer warpgroup, a consumer warpgroup.
ATTUNE_KERNEL void multicast_ring(const ATTUNE_GRID_CONSTANT ClusterParams p) {
  unsigned char* smem = dev::shared_memory<unsigned char>();
  u64* full = dev::shared_as<u64>(smem);
  u64* empty = full + kStages;
  const i32 rank = dev::cluster::rank();
  const i32 blocks = dev::cluster::size();
  const i32 half_rows = kTileRows / blocks;
  const i32 t = dev::linear_thread();
  if (t == 0) {
    for (i32 s = 0; s < kStages; ++s) {
      dev::mbarrier::init(full + s, 1);
      dev::mbarrier::init(empty + s, blocks);  // the consumer of every block releases it
    }
    dev::mbarrier::fence_init();
  }
  if (p.plant == kBlockSyncAfterInit) {
    dev::block::sync();
  } else {
    dev::cluster::sync();
  }
  if (dev::warpgroup::index() == 0) {
    if (dev::warp_id() == 0 && dev::elect_one()) {
      const u32 mask = p.plant == kMaskPastTheCluster ? 0x7U : (1U << blocks) - 1;
      for (i32 r = 0; r < kRounds; ++r) {
        const i32 s = r % kStages;
        dev::mbarrier::wait(empty + s, ((r / kStages) & 1) ^ 1);
        const i32 expected = p.plant == kExpectOwnHalf ? kTileBytes / blocks : kTileBytes;
        dev::mbarrier::arrive_expect_tx(full + s, static_cast<u32>(expected));
        unsigned char* half = smem + kTileOffset + s * kTileBytes + rank * half_rows * kCols * 4;
        const i32 row0 = r * kTileRows + rank * half_rows;
        dev::tma::load_multicast(half, &p.rows, full + s, mask, 0, row0);  // producer: multicast
      }
    }
  } else {
    const i32 ct = dev::warpgroup::thread();
    float sum = 0.0F;
    for (i32 r = 0; r < kRounds; ++r) {
      const i32 s = r % kStages;
      dev::mbarrier::wait(full + s, (r / kStages) & 1);  // consumer: wait full
      const float* tile = dev::shared_as<const float>(smem + kTileOffset + s * kTileBytes);
      for (i32 e = ct; e < kTileRows * kCols; e += 128) sum += dev::load_shared(tile + e);  // consumer: read
      if (p.plant == kPeerByPointer && rank == 0)
        sum += dev::load_shared(tile + kSharedBytes / 4);  // planted: peer by pointer
      dev::named_barrier::sync(1, 128);
      if (ct == 0) {
        for (i32 b = 0; b < blocks; ++b) {
          const i32 to = p.plant == kReleaseOwnBlockTwice ? rank : b;
          dev::mbarrier::arrive_cluster(empty + s, to);  // consumer: release both
        }
      }
    }
    dev::store_global(p.out + dev::block_index().x * 128 + ct, sum);
  }
  if (p.plant != kNoClusterSyncAtExit) dev::cluster::sync();
}

struct Ring {
  std::vector<float> rows = std::vector<float>(kRounds * kTileRows * kCols);
  std::vector<float> out;
  emu::Emulator emulator;
  explicit Ring(i32 blocks, emu::Emulator::Options options = {})
      : out(static_cast<std::size_t>(blocks) * 128, -1.0F), emulator(options) {
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 97) + 0.25F;
    emulator.register_buffer("rows", rows.data(), rows.size() * 4);
    emulator.register_buffer("out", out.data(), out.size() * 4);
  }
  void run(i32 plant, i32 blocks, i32 cluster) {
    TensorMapSpec spec;
    spec.address = rows.data();
    spec.rank = 2;
    spec.element_bytes = 4;
    spec.dims = {kCols, static_cast<u64>(kRounds * kTileRows), 1, 1, 1};
    spec.strides = {kCols * 4, 0, 0, 0};
    spec.box = {kCols, static_cast<u32>(kTileRows / cluster), 1, 1, 1};
    emulator.launch(&multicast_ring,
                    LaunchConfig{.grid = {blocks, 1, 1},
                                 .block = {256, 1, 1},
                                 .dynamic_shared_bytes = kSharedBytes,
                                 .cluster = {cluster, 1, 1}},
                    ClusterParams{encode_emulated_tensor_map(spec), out.data(), plant});
  }
  // What consumer thread ct sums: its elements of every tile.
  float expected(i32 ct) const {
    float sum = 0.0F;
    for (i32 r = 0; r < kRounds; ++r) {
      for (i32 e = ct; e < kTileRows * kCols; e += 128)
        sum += rows[static_cast<std::size_t>(r * kTileRows * kCols + e)];
    }
    return sum;
  }
};

TEST(ClusterEmuTest, TwoBlocksShareEveryTileThroughMulticastWithNoReport) {
  for (const i32 cluster : {1, 2, 4}) {
    SCOPED_TRACE("cluster of " + std::to_string(cluster));
    Ring ring(8);
    ring.run(kNone, 8, cluster);
    for (i32 b = 0; b < 8; ++b) {
      for (i32 ct = 0; ct < 128; ++ct) {
        ASSERT_EQ(ring.out[static_cast<std::size_t>(b * 128 + ct)], ring.expected(ct))
            << "block " << b << " thread " << ct;
      }
    }
  }
}

TEST(ClusterEmuTest, AnySchedulingSeedGivesTheSameResultWithNoReport) {
  for (const std::uint64_t seed : {1ULL, 2ULL, 3ULL}) {
    Ring ring(4, emu::Emulator::Options{.schedule_seed = seed});
    ring.run(kNone, 4, 2);
    for (i32 ct = 0; ct < 128; ++ct) EXPECT_EQ(ring.out[static_cast<std::size_t>(3 * 128 + ct)], ring.expected(ct));
  }
}

TEST(ClusterEmuTest, ABadClusterShapeIsRefusedSayingWhy) {
  Ring ring(3);
  try {
    ring.run(kNone, 3, 2);
    FAIL() << "a grid of 3 blocks in clusters of 2 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("divide the grid"), std::string::npos) << e.what();
  }
}

using Planted = testing::PlantedBug;

class ClusterPlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(ClusterPlantedBugTest, IsReportedWithItsKindAtItsLine) {
  const Planted& p = GetParam();
  Ring ring(2);
  testing::expect_planted_bug_reported(p, "cluster_test.cpp", [&] { ring.run(p.plant, 2, 2); });
}

INSTANTIATE_TEST_SUITE_P(
    Detectors, ClusterPlantedBugTest,
    ::testing::Values(Planted{kBlockSyncAfterInit, BugKind::kMbarrierMisuse, "producer: multicast", "mbarrier::init",
                              "BlockSyncAfterInit"},
                      // The last release reaches a block that has exited.
                      Planted{kNoClusterSyncAtExit, BugKind::kMbarrierMisuse, "consumer: release both",
                              "which has exited", "NoClusterSyncAtExit"},
                      // The phase completes on the own half: the peer's is read before it lands.
                      Planted{kExpectOwnHalf, BugKind::kAsyncProxyOrder, "consumer: read",
                              "whose mbarrier phase has not completed", "ExpectOwnHalf"},
                      Planted{kMaskPastTheCluster, BugKind::kTmaMisuse, "producer: multicast", "block rank(s)",
                              "MaskPastTheCluster"},
                      Planted{kPeerByPointer, BugKind::kSharedOutOfBounds, "planted: peer by pointer",
                              "but the dynamic shared memory has", "PeerByPointer"},
                      Planted{kReleaseOwnBlockTwice, BugKind::kAsyncProxyOrder, "producer: multicast",
                              "with no happens-before from that access to this load", "ReleaseOwnBlockTwice"}),
    testing::planted_bug_name);

}  // namespace
}  // namespace attune
