// TMA on the emulator. Tensor maps are checked by the rules of
// cuTensorMapEncodeTiled, one message each. A warp-specialized GEMM
// (tma_gemm.cuh: a TMA producer, two wgmma consumers, a ring of full/empty
// mbarriers, a named-barrier hand-off, setmaxnreg, a TMA store of C) matches
// an fp64 matmul with no report in fp16 and bf16, for three N and every
// swizzle mode, with K not a multiple of the tile (the box past the tensor
// reads zeros). Each planted bug is reported with its kind at its line.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor_map.h"
#include "emulator/emulator.h"
#include "tests/emulator/planted_report.h"
#include "tests/emulator/tma_gemm.cuh"
#include "tests/emulator/tma_gemm_maps.h"
#include "tests/support/swizzled_tile_map.h"

namespace attune {
namespace {

using emu::BugKind;
using sm90::Swizzle;
using test_kernels::TmaGemmParams;

alignas(16) const unsigned char kSome[64] = {};

TensorMapSpec valid_map() { return testing::swizzled_tile_map(kSome, 8, 8); }

void expect_refused(const TensorMapSpec& s, const std::string& says) {
  try {
    check_tensor_map(s);
    ADD_FAILURE() << "accepted; expected a refusal saying '" << says << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(TensorMapTest, EveryRuleOfTheDriverIsCheckedWithItsMessage) {
  check_tensor_map(valid_map());
  TensorMapSpec s = valid_map();
  s.rank = 6;
  expect_refused(s, "tensor map rank: got 6; expected 1..5");
  s = valid_map();
  s.address = kSome + 8;
  expect_refused(s, "expected a non-null address aligned to 16 bytes");
  s = valid_map();
  s.dims[1] = 0;
  expect_refused(s, "tensor map dims[1]: got 0; expected 1..2^32");
  s = valid_map();
  s.box[1] = 257;
  expect_refused(s, "tensor map box[1]: got 257; expected 1..256 elements");
  s = valid_map();
  s.strides[0] = 120;
  expect_refused(s, "tensor map strides[0]: got 120 bytes; expected a multiple of 16");
  s = valid_map();
  s.swizzle = Swizzle::kNone;
  s.box[0] = 12;
  expect_refused(s, "tensor map box[0]: got 12 elements (24 bytes); expected a multiple of 16 bytes");
  s = valid_map();
  s.swizzle = Swizzle::k64B;
  expect_refused(s, "got 128 bytes with the 64-byte swizzle; expected at most the swizzle span, 64 bytes");
  s = valid_map();
  s.element_strides[0] = 9;
  expect_refused(s, "tensor map element_strides[0]: got 9; expected 1..8");
  TensorMapSpec back;
  ASSERT_TRUE(decode_emulated_tensor_map(encode_emulated_tensor_map(valid_map()), &back));
  EXPECT_EQ(back.address, static_cast<const void*>(kSome));
  EXPECT_EQ(back.dims[0], 64U);
  EXPECT_EQ(back.strides[0], 128U);
  EXPECT_EQ(back.box[1], 8U);
  EXPECT_EQ(back.swizzle, Swizzle::k128B);
  EXPECT_FALSE(decode_emulated_tensor_map(TensorMap{}, &back));
}

constexpr i32 kKTiles = 5;

struct GemmRun {
  std::vector<float> c;
  std::vector<double> reference;
  std::vector<double> magnitude;
  i32 k = 0;
};

// K is 8 short of the last tile: its box reads zeros past the tensor.
template <class D, i32 kN, Swizzle kSwizzle>
GemmRun run_tma_gemm(i32 plant) {
  using L = test_kernels::TmaGemmLayout<kN, kSwizzle, 2>;
  GemmRun run;
  run.k = kKTiles * L::kTileK - 8;
  const i32 k = run.k;
  std::mt19937 rng(kN + 3 * static_cast<int>(kSwizzle));
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<u16> a(static_cast<std::size_t>(128 * k)), bt(static_cast<std::size_t>(kN * k));
  for (u16& x : a) x = testing::bits_of<D>(dist(rng));
  for (u16& x : bt) x = testing::bits_of<D>(dist(rng));
  run.c.assign(static_cast<std::size_t>(128 * kN), -1.0F);
  run.reference.assign(run.c.size(), 0.0);
  run.magnitude.assign(run.c.size(), 0.0);
  for (int m = 0; m < 128; ++m) {
    for (int n = 0; n < kN; ++n) {
      for (int kk = 0; kk < k; ++kk) {
        const double prod = testing::value_of<D>(a[static_cast<std::size_t>(m * k + kk)]) *
                            testing::value_of<D>(bt[static_cast<std::size_t>(n * k + kk)]);
        run.reference[static_cast<std::size_t>(m * kN + n)] += prod;
        run.magnitude[static_cast<std::size_t>(m * kN + n)] += std::abs(prod);
      }
    }
  }
  TmaGemmParams p = testing::tma_gemm_maps<kN, kSwizzle>(
      a.data(), bt.data(), run.c.data(), k, [](const TensorMapSpec& s) { return encode_emulated_tensor_map(s); });
  p.k_tiles = kKTiles;
  p.plant = plant;
  emu::Emulator emulator;
  emulator.register_buffer("a", a.data(), a.size() * 2);
  emulator.register_buffer("b", bt.data(), bt.size() * 2);
  emulator.register_buffer("c", run.c.data(), run.c.size() * 4);
  emulator.launch(&test_kernels::tma_gemm<D, kN, kSwizzle, 2>, LaunchConfig{{1, 1, 1}, {384, 1, 1}, L::kSharedBytes},
                  p);
  return run;
}

template <class D, i32 kN, Swizzle kSwizzle>
void expect_matches_fp64() {
  SCOPED_TRACE(std::string(std::is_same_v<D, Bf16> ? "bf16" : "fp16") + " N " + std::to_string(kN) + " swizzle " +
               std::to_string(sm90::swizzle_span(kSwizzle)));
  const GemmRun run = run_tma_gemm<D, kN, kSwizzle>(test_kernels::kTmaPlantNone);
  int bad = 0;
  for (std::size_t i = 0; i < run.c.size(); ++i) {
    const double bound = run.k * 0x1p-24 * run.magnitude[i] + 1e-30;
    if (!(std::abs(run.c[i] - run.reference[i]) <= bound) && ++bad <= 5) {
      ADD_FAILURE() << "C[" << i / kN << "][" << i % kN << "] = " << run.c[i] << ", fp64 " << run.reference[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(TmaGemmEmuTest, AWarpSpecializedGemmMatchesFp64WithNoReport) {
  expect_matches_fp64<Bf16, 64, Swizzle::k128B>();
  expect_matches_fp64<Fp16, 128, Swizzle::k64B>();
  expect_matches_fp64<Bf16, 256, Swizzle::k32B>();
}

struct Planted {
  const char* name;
  i32 plant;
  BugKind kind;
  const char* mark;
  const char* says;
};

class TmaPlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(TmaPlantedBugTest, IsReportedWithItsKindAtItsLine) {
  const Planted& p = GetParam();
  testing::expect_planted_bug_reported(p, "tma_gemm.cuh", [&] { run_tma_gemm<Bf16, 64, Swizzle::k128B>(p.plant); });
}

std::string planted_name(const ::testing::TestParamInfo<Planted>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Detectors, TmaPlantedBugTest,
    ::testing::Values(Planted{"NoHandOff", test_kernels::kTmaPlantNoHandOff, BugKind::kAsyncProxyOrder,
                              "consumer: wgmma", "TMA load"},
                      Planted{"WrongParity", test_kernels::kTmaPlantWrongParity, BugKind::kAsyncProxyOrder,
                              "consumer: wgmma", "TMA load"},
                      Planted{"EarlyRelease", test_kernels::kTmaPlantEarlyRelease, BugKind::kAsyncProxyOrder,
                              "producer: load A", "which an in-flight wgmma or TMA store reads"},
                      Planted{"NoRelease", test_kernels::kTmaPlantNoRelease, BugKind::kDeadlock, "consumer: hand-off",
                              "2 of 2 arrivals pending"},
                      Planted{"TxMismatch", test_kernels::kTmaPlantTxMismatch, BugKind::kMbarrierMisuse,
                              "producer: load B", "16 more than expect_tx announced"},
                      Planted{"StoreNoFence", test_kernels::kTmaPlantStoreNoFence, BugKind::kAsyncProxyOrder,
                              "consumer: store C", "no fence.proxy.async since"},
                      // Thread 0 of the warpgroup stores C before the others staged theirs.
                      Planted{"StoreNoBarrier", test_kernels::kTmaPlantStoreNoBarrier, BugKind::kAsyncProxyOrder,
                              "consumer: stage C", "was read by a wgmma or TMA store of thread (128,0,0)"},
                      Planted{"TooManyRegisters", test_kernels::kTmaPlantTooManyRegisters,
                              BugKind::kIllegalRegisterCount, "planted: too many registers",
                              "66560 registers, more than the 65536 of a block"},
                      Planted{"MisalignedStage", test_kernels::kTmaPlantMisalignedStage, BugKind::kTmaMisuse,
                              "producer: load A", "a swizzled buffer starts at its swizzle atom"}),
    planted_name);

}  // namespace
}  // namespace attune
