// The bank model on patterns whose cost the CUDA programming guide states,
// and the emulator's accounting of a warp's accesses at their template line.
#include "emulator/bank_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "templates/primitives/primitives.h"

namespace attune::emu {
namespace {

std::vector<LaneAccess> lanes(std::uint32_t bytes, std::uint64_t stride, int count = 32) {
  std::vector<LaneAccess> out;
  for (int l = 0; l < count; ++l) out.push_back({l, static_cast<std::uint64_t>(l) * stride, bytes});
  return out;
}

// Patterns of 32 lanes, `bytes` each and `stride` bytes apart, against the
// wavefronts the guide gives them (and the fewest their bytes could take).
TEST(BankModelTest, LanePatternsTakeTheGuidesWavefronts) {
  const struct {
    const char* pattern;
    std::uint32_t bytes;
    std::uint64_t stride;
    std::uint64_t actual;
    std::uint64_t ideal;
  } patterns[] = {
      {"consecutive words: one wavefront", 4, 4, 1, 1},
      {"one bank for every lane: serialized 32 ways", 4, 128, 32, 1},
      {"16-byte accesses go in quarter warps (512 contiguous bytes)", 16, 16, 4, 4},
      // Rows of 128 bytes, one 16-byte chunk each: every phase hits 4 banks 8 times.
      {"16-byte chunks of 128-byte rows", 16, 128, 32, 4},
      {"8-byte accesses go in half warps", 8, 8, 2, 2},
  };
  for (const auto& p : patterns) {
    const Wavefronts w = access_wavefronts(lanes(p.bytes, p.stride));
    EXPECT_EQ(w.actual, p.actual) << p.pattern;
    EXPECT_EQ(w.ideal, p.ideal) << p.pattern;
  }
}

TEST(BankModelTest, TheSameWordIsBroadcast) {
  const Wavefronts w = access_wavefronts(lanes(4, 0));
  EXPECT_EQ(w.actual, 1U);
}

TEST(BankModelTest, LdmatrixRowsOneBankGroupApartConflictEightWays) {
  std::vector<std::uint64_t> pitch128;
  std::vector<std::uint64_t> pitch256;
  std::vector<std::uint64_t> padded;
  std::vector<std::uint64_t> swizzled;
  for (std::uint64_t r = 0; r < 8; ++r) {
    pitch128.push_back(r * 128);
    pitch256.push_back(r * 256);
    padded.push_back(r * 144);                   // a 16-byte pad per row
    swizzled.push_back(r * 128 + 16 * (r ^ 0));  // chunk 0 of row r stored at chunk r
  }
  EXPECT_EQ(ldmatrix_wavefronts(pitch128).actual, 8U);
  EXPECT_EQ(ldmatrix_wavefronts(pitch256).actual, 8U);
  EXPECT_EQ(ldmatrix_wavefronts(padded).actual, 1U);
  EXPECT_EQ(ldmatrix_wavefronts(swizzled).actual, 1U);
  EXPECT_EQ(ldmatrix_wavefronts(swizzled).ideal, 1U);
}

// A warp reads an 8 x 8 matrix of 16-bit elements by ldmatrix, rows `pitch`
// bytes apart, and every lane stores one float.
void matrix_kernel(int pitch) {
  unsigned char* base = dev::shared_memory<unsigned char>();
  const i32 lane = dev::lane_id();
  dev::store_shared(reinterpret_cast<float*>(base) + dev::linear_thread(), 1.0F);
  dev::block::sync();
  u32 r[1];
  dev::warp::ldmatrix_x1(r, base + (lane % 8) * pitch);
}

TEST(BankAccountingTest, TheEmulatorCountsEachWarpInstructionAtItsLine) {
  for (const int pitch : {128, 144}) {
    Emulator emulator;
    emulator.launch({.grid = {1, 1, 1}, .block = {64, 1, 1}, .dynamic_shared_bytes = 8 * 256},
                    [&] { matrix_kernel(pitch); });
    const LaunchCounters& c = emulator.counters();
    EXPECT_EQ(c.ldmatrix, 2U);  // one per warp
    EXPECT_EQ(c.barriers, 1U);
    EXPECT_EQ(c.shared_instructions, 2U);  // the stores, one instruction per warp
    const std::vector<SiteTraffic> worst = c.worst(1);
    ASSERT_EQ(worst.size(), 1U);
    EXPECT_NE(worst[0].site.find("bank_model_test.cpp"), std::string::npos) << worst[0].site;
    // Stores: 1 wavefront each; ldmatrix: 8 (pitch 128) or 1 (padded rows).
    EXPECT_EQ(c.shared_wavefronts, pitch == 128 ? 2U + 2U * 8U : 4U) << pitch;
    EXPECT_EQ(c.shared_ideal, 4U);
  }
}

}  // namespace
}  // namespace attune::emu
