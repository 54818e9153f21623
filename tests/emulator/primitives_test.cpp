// Tests of the emulated device primitives (templates/primitives/emulated.h on
// top of emulator/). Every expectation is computed here, independently, from
// the PTX ISA's definitions and layout tables; emulator/warp_ops is never
// used as the oracle. Kernels touch memory only through the primitives, so a
// clean launch must not throw KernelFault.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "emulator/emulator.h"
#include "templates/primitives/primitives.h"

namespace attune {
namespace {

using emu::Emulator;

// --- helpers ---------------------------------------------------------------

// Registers `v` (or its first `bytes`) as a global buffer; returns its data.
template <class T>
T* reg(Emulator& emu, const char* name, std::vector<T>& v, std::size_t bytes = 0) {
  emu.register_buffer(name, v.data(), bytes != 0 ? bytes : v.size() * sizeof(T));
  return v.data();
}

// Launches and turns a KernelFault into a test failure that lists the reports.
template <class Params>
::testing::AssertionResult launch(Emulator& emu, void (*kernel)(Params), Dim3 grid, Dim3 block, const Params& params,
                                  std::int64_t shared_bytes = 0) {
  try {
    emu.launch(kernel, LaunchConfig{.grid = grid, .block = block, .dynamic_shared_bytes = shared_bytes}, params);
  } catch (const emu::KernelFault& fault) {
    return ::testing::AssertionFailure() << fault.what();
  }
  return ::testing::AssertionSuccess();
}

// Element-wise equality that reports the first few mismatches by index.
template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ < 8) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": number of mismatches";
}

std::vector<u32> bits_of(const std::vector<float>& v) {
  std::vector<u32> out;
  for (float x : v) out.push_back(std::bit_cast<u32>(x));
  return out;
}

constexpr u32 pack_pair(u16 lo, u16 hi) { return static_cast<u32>(lo) | (static_cast<u32>(hi) << 16); }

// --- 1. thread, block, lane and warp indices --------------------------------

constexpr int kIndexFields = 14;
struct IndexParams {
  i32* out;  // kIndexFields per thread, blocks and threads in x-fastest order
};

ATTUNE_KERNEL void index_kernel(IndexParams p) {
  const Dim3 t = dev::thread_index();
  const Dim3 b = dev::block_index();
  const Dim3 bd = dev::block_dim();
  const Dim3 gd = dev::grid_dim();
  const i32 slot = (b.x + gd.x * (b.y + gd.y * b.z)) * (bd.x * bd.y * bd.z) + t.x + bd.x * (t.y + bd.y * t.z);
  const i32 fields[kIndexFields] = {
      t.x, t.y, t.z, b.x, b.y, b.z, bd.x, bd.y, bd.z, gd.x, gd.y, gd.z, dev::lane_id(), dev::warp_id()};
  for (i32 f = 0; f < kIndexFields; ++f) dev::store_global(p.out + slot * kIndexFields + f, fields[f]);
}

TEST(Primitives, ThreadBlockLaneAndWarpIndices) {
  const Dim3 grid{2, 3, 2};
  const Dim3 block{6, 4, 3};  // 72 threads: warps cross rows and slices, warp 2 is partial
  const int threads = 72;
  std::vector<i32> out(12 * threads * kIndexFields, -1);
  std::vector<i32> want(out.size());
  Emulator emu;
  ASSERT_TRUE(launch(emu, &index_kernel, grid, block, IndexParams{reg(emu, "out", out)}));
  for (int bz = 0; bz < 2; ++bz)
    for (int by = 0; by < 3; ++by)
      for (int bx = 0; bx < 2; ++bx)
        for (int tz = 0; tz < 3; ++tz)
          for (int ty = 0; ty < 4; ++ty)
            for (int tx = 0; tx < 6; ++tx) {
              // CUDA: the linear thread id is x + y*Dx + z*Dx*Dy; warps are runs of 32 of it.
              const int linear = tx + 6 * (ty + 4 * tz);
              const int slot = (bx + 2 * (by + 3 * bz)) * threads + linear;
              const int fields[kIndexFields] = {tx, ty, tz, bx, by, bz, 6, 4, 3, 2, 3, 2, linear % 32, linear / 32};
              for (int f = 0; f < kIndexFields; ++f) want[slot * kIndexFields + f] = fields[f];
            }
  expect_equal(out, want, "index fields");
}

// --- 2. shuffles and warp reductions ----------------------------------------

constexpr int kShflThreads = 64;  // two warps, which must not mix
constexpr int kXorMasks = 31;     // every butterfly mask 1..31 of a 32-lane warp
constexpr int kIdxRounds = 7;
constexpr int kShflRounds = kXorMasks + kIdxRounds;

// shfl_idx source operand of `round` for `lane`: mul * lane + add; rounds 0-1
// stay in 0..31, the others reach past 31 or below 0.
constexpr i32 kIdxMul[kIdxRounds] = {-1, 0, 5, 1, 3, -1, 7};
constexpr i32 kIdxAdd[kIdxRounds] = {31, 5, 0, 32, 77, -1, 1000};
constexpr i32 idx_operand(int round, i32 lane) { return kIdxMul[round] * lane + kIdxAdd[round]; }
// ISA shfl.sync: bval = b[4:0] and, for width 32 (c = 0x1f), .idx reads lane bval.
constexpr i32 idx_source(int round, i32 lane) { return idx_operand(round, lane) & 31; }

u32 value_u32(i32 tid) { return 0x9E3779B9U * static_cast<u32>(tid + 1); }
i32 value_i32(i32 tid) { return (tid % 2 == 0 ? 1 : -1) * (tid * 131 + 7); }
float value_f32(i32 tid) { return static_cast<float>(tid) * 0.375F - 11.5F; }
float max_input(i32 tid) { return static_cast<float>((tid * 13) % 64) - 20.0F; }  // distinct, max mid-warp

struct ShuffleParams {
  u32* u;  // [round][tid]: rounds 0-30 shfl_xor with mask round+1, then the shfl_idx rounds
  i32* i;
  float* f;
  const float* random;
  float* max;
  float* sum;  // [tid]: reduce_sum of max_input; [64 + tid]: reduce_sum of random
};

ATTUNE_KERNEL void shuffle_kernel(ShuffleParams p) {
  const i32 tid = dev::thread_index().x;
  const i32 lane = dev::lane_id();
  for (i32 mask = 1; mask <= kXorMasks; ++mask) {
    const i32 at = (mask - 1) * kShflThreads + tid;
    dev::store_global(p.u + at, dev::warp::shfl_xor(value_u32(tid), mask));
    dev::store_global(p.i + at, dev::warp::shfl_xor(value_i32(tid), mask));
    dev::store_global(p.f + at, dev::warp::shfl_xor(value_f32(tid), mask));
  }
  for (i32 round = 0; round < kIdxRounds; ++round) {
    const i32 at = (kXorMasks + round) * kShflThreads + tid;
    dev::store_global(p.u + at, dev::warp::shfl_idx(value_u32(tid), idx_operand(round, lane)));
    dev::store_global(p.i + at, dev::warp::shfl_idx(value_i32(tid), idx_operand(round, lane)));
    dev::store_global(p.f + at, dev::warp::shfl_idx(value_f32(tid), idx_operand(round, lane)));
  }
  dev::store_global(p.max + tid, dev::warp::reduce_max(max_input(tid)));
  dev::store_global(p.sum + tid, dev::warp::reduce_sum(max_input(tid)));
  dev::store_global(p.sum + kShflThreads + tid, dev::warp::reduce_sum(dev::load_global(p.random + tid)));
}

TEST(Primitives, ShuffleXorIdxAndReductions) {
  std::vector<u32> u(kShflRounds * kShflThreads);
  std::vector<i32> i(u.size());
  std::vector<float> f(u.size()), max(kShflThreads), sum(2 * kShflThreads), random(kShflThreads);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  for (float& x : random) x = dist(rng);
  Emulator emu;
  const ShuffleParams params{reg(emu, "u", u),           reg(emu, "i", i),     reg(emu, "f", f),
                             reg(emu, "random", random), reg(emu, "max", max), reg(emu, "sum", sum)};
  ASSERT_TRUE(launch(emu, &shuffle_kernel, {1, 1, 1}, {kShflThreads, 1, 1}, params));

  std::vector<u32> want_u(u.size());
  std::vector<i32> want_i(u.size());
  std::vector<float> want_f(u.size());
  for (int round = 0; round < kShflRounds; ++round) {
    for (int tid = 0; tid < kShflThreads; ++tid) {
      const int lane = tid % 32;
      const int src_lane = round < kXorMasks ? lane ^ (round + 1) : idx_source(round - kXorMasks, lane);
      const int src = tid - lane + src_lane;  // same warp
      const int at = round * kShflThreads + tid;
      want_u[at] = value_u32(src);
      want_i[at] = value_i32(src);
      want_f[at] = value_f32(src);
    }
  }
  expect_equal(u, want_u, "u32 shuffles");
  expect_equal(i, want_i, "i32 shuffles");
  expect_equal(bits_of(f), bits_of(want_f), "float shuffles (bits)");

  for (int w = 0; w < 2; ++w) {
    float want_max = -1e30F;
    double int_sum = 0;
    double rand_sum = 0;
    double rand_abs = 0;
    for (int lane = 0; lane < 32; ++lane) {
      want_max = std::max(want_max, max_input(32 * w + lane));
      int_sum += max_input(32 * w + lane);
      rand_sum += random[32 * w + lane];
      rand_abs += std::fabs(random[32 * w + lane]);
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int tid = 32 * w + lane;
      EXPECT_EQ(max[tid], want_max) << "reduce_max, thread " << tid;
      EXPECT_EQ(sum[tid], static_cast<float>(int_sum)) << "reduce_sum of integers, thread " << tid;
      EXPECT_NEAR(sum[kShflThreads + tid], rand_sum, 1e-5 * rand_abs) << "reduce_sum, thread " << tid;
      // The butterfly leaves every lane with bitwise the same sum.
      EXPECT_EQ(std::bit_cast<u32>(sum[kShflThreads + tid]), std::bit_cast<u32>(sum[kShflThreads + 32 * w]));
    }
  }
}

struct XorParams {
  u32* out;  // [mask index][lane]
};
constexpr i32 kWideMasks[] = {32, 33, 47, 63, -1, -16};

ATTUNE_KERNEL void wide_xor_kernel(XorParams p) {
  const i32 lane = dev::lane_id();
  for (i32 m = 0; m < 6; ++m)
    dev::store_global(p.out + m * 32 + lane, dev::warp::shfl_xor(value_u32(lane), kWideMasks[m]));
}

// The ISA's shfl pseudocode takes bval = b[4:0] ("an out of range value of b
// may still result in a valid computed source lane index j"), so for width 32
// .bfly reads lane ^ (mask & 31). (The emulator once used the whole mask.)
TEST(Primitives, ShuffleXorUsesLowFiveBitsOfTheMask) {
  std::vector<u32> out(6 * 32);
  Emulator emu;
  ASSERT_TRUE(launch(emu, &wide_xor_kernel, {1, 1, 1}, {32, 1, 1}, XorParams{reg(emu, "out", out)}));
  std::vector<u32> want(out.size());
  for (int m = 0; m < 6; ++m)
    for (int lane = 0; lane < 32; ++lane) want[m * 32 + lane] = value_u32(lane ^ (kWideMasks[m] & 31));
  expect_equal(out, want, "shfl_xor with masks outside 0..31");
}

// --- 3. mma.sync.m16n8k16 ------------------------------------------------------

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type":
// groupID = %laneid >> 2, threadID_in_group = %laneid % 4.
struct RowCol {
  i32 row;
  i32 col;
};
constexpr i32 group_id(i32 lane) { return lane >> 2; }
constexpr i32 tig(i32 lane) { return lane % 4; }

// A (16x16 .f16/.bf16, .row): a0..a7, two per .b32 register (a0,a1 in
// register 0, a2,a3 in register 1, ...), the lower index in the low half.
//   row = groupID      for a0, a1, a4, a5;   groupID + 8 otherwise
//   col = tig*2 + (i & 1)  for i < 4;         tig*2 + 8 + (i & 1) for i >= 4
constexpr RowCol a_element(i32 lane, i32 i) {
  const bool upper_rows = i < 2 || (i >= 4 && i < 6);
  return {upper_rows ? group_id(lane) : group_id(lane) + 8, tig(lane) * 2 + (i & 1) + (i < 4 ? 0 : 8)};
}
// B (16x8, .col): b0..b3, two per register.
//   row (k) = tig*2 + (i & 1)  for b0, b1;    tig*2 + 8 + (i & 1) for b2, b3;   col (n) = groupID
constexpr RowCol b_element(i32 lane, i32 i) { return {tig(lane) * 2 + (i & 1) + (i < 2 ? 0 : 8), group_id(lane)}; }
// C and D (16x8 .f32): c0..c3, one per register.
//   row = groupID for c0, c1;  groupID + 8 for c2, c3;   col = tig*2 + (i & 1)
constexpr RowCol c_element(i32 lane, i32 i) { return {group_id(lane) + (i < 2 ? 0 : 8), tig(lane) * 2 + (i & 1)}; }

struct MmaParams {
  const u16* a;    // 16x16 row-major
  const u16* b;    // 16x8, element (k, n) at k*8 + n
  const float* c;  // 16x8 row-major
  float* d;        // 16x8 row-major
  i32 swap_a1_a2;  // deliberately wrong fragment: registers a[1] and a[2] exchanged
};

template <class D>
ATTUNE_KERNEL void mma_kernel(MmaParams p) {
  const i32 lane = dev::lane_id();
  const auto a_at = [&](i32 i) { return dev::load_global(p.a + a_element(lane, i).row * 16 + a_element(lane, i).col); };
  const auto b_at = [&](i32 i) { return dev::load_global(p.b + b_element(lane, i).row * 8 + b_element(lane, i).col); };
  u32 a[4];
  u32 b[2];
  float c[4];
  float d[4];
  for (i32 r = 0; r < 4; ++r) a[r] = pack_pair(a_at(2 * r), a_at(2 * r + 1));
  for (i32 r = 0; r < 2; ++r) b[r] = pack_pair(b_at(2 * r), b_at(2 * r + 1));
  for (i32 i = 0; i < 4; ++i) c[i] = dev::load_global(p.c + c_element(lane, i).row * 8 + c_element(lane, i).col);
  if (p.swap_a1_a2 != 0) std::swap(a[1], a[2]);
  dev::warp::mma_m16n8k16<D>(d, a, b, c);
  for (i32 i = 0; i < 4; ++i) dev::store_global(p.d + c_element(lane, i).row * 8 + c_element(lane, i).col, d[i]);
}

struct MmaCase {
  std::vector<u16> a = std::vector<u16>(256);
  std::vector<u16> b = std::vector<u16>(128);
  std::vector<float> c = std::vector<float>(128);
};

template <class D>
constexpr DType kDType = std::is_same_v<D, Bf16> ? DType::kBF16 : DType::kF16;

// Random values (rounded to the storage dtype), or small integers when `integers`.
template <class D>
MmaCase make_mma_case(unsigned seed, bool integers) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-1.0F, 1.0F);
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_int_distribution<int> medium(-64, 64);
  MmaCase m;
  const auto draw = [&] { return integers ? static_cast<float>(small(rng)) : real(rng); };
  for (u16& x : m.a) x = float_to_bits(kDType<D>, draw());
  for (u16& x : m.b) x = float_to_bits(kDType<D>, draw());
  for (float& x : m.c) x = integers ? static_cast<float>(medium(rng)) : real(rng);
  return m;
}

template <class D>
std::vector<float> run_mma(const MmaCase& m, bool swap_a1_a2) {
  MmaCase in = m;
  std::vector<float> d(128, std::numeric_limits<float>::quiet_NaN());
  Emulator emu;
  const MmaParams params{reg(emu, "a", in.a), reg(emu, "b", in.b), reg(emu, "c", in.c), reg(emu, "d", d),
                         swap_a1_a2 ? 1 : 0};
  EXPECT_TRUE(launch(emu, &mma_kernel<D>, {1, 1, 1}, {32, 1, 1}, params));
  return d;
}

// D = A*B + C in fp64, and sum |a*b| + |c| per element. With `swap_blocks`, A's
// top-right and bottom-left 8x8 blocks are exchanged, which is what swapping
// registers a[1] (rows g+8, cols 0-7) and a[2] (rows g, cols 8-15) presents.
void mma_reference(DType dtype, const MmaCase& m, bool swap_blocks, std::vector<double>& d, std::vector<double>& mag) {
  d.assign(128, 0.0);
  mag.assign(128, 0.0);
  for (int row = 0; row < 16; ++row)
    for (int n = 0; n < 8; ++n) {
      double acc = m.c[row * 8 + n];
      double abs = std::fabs(acc);
      for (int k = 0; k < 16; ++k) {
        int ar = row;
        int ak = k;
        if (swap_blocks && (row < 8) != (k < 8)) {
          ar = row < 8 ? row + 8 : row - 8;
          ak = k < 8 ? k + 8 : k - 8;
        }
        const double prod = static_cast<double>(bits_to_float(dtype, m.a[ar * 16 + ak])) *
                            static_cast<double>(bits_to_float(dtype, m.b[k * 8 + n]));
        acc += prod;
        abs += std::fabs(prod);
      }
      d[row * 8 + n] = acc;
      mag[row * 8 + n] = abs;
    }
}

template <class D>
void check_random_mma() {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const MmaCase m = make_mma_case<D>(seed, /*integers=*/false);
    const std::vector<float> got = run_mma<D>(m, false);
    std::vector<double> want;
    std::vector<double> mag;
    mma_reference(kDType<D>, m, false, want, mag);
    for (int e = 0; e < 128; ++e) {
      EXPECT_NEAR(got[e], want[e], 1e-5 * mag[e]) << "seed " << seed << " D(" << e / 8 << "," << e % 8 << ")";
    }
  }
}

TEST(Primitives, MmaFp16MatchesFp64Product) { check_random_mma<Fp16>(); }
TEST(Primitives, MmaBf16MatchesFp64Product) { check_random_mma<Bf16>(); }

template <class D>
void check_integer_mma() {
  const MmaCase m = make_mma_case<D>(11, /*integers=*/true);
  std::vector<double> want;
  std::vector<double> swapped;
  std::vector<double> mag;
  mma_reference(kDType<D>, m, false, want, mag);
  mma_reference(kDType<D>, m, true, swapped, mag);
  const std::vector<float> got = run_mma<D>(m, false);
  for (int e = 0; e < 128; ++e) EXPECT_EQ(got[e], want[e]) << "D(" << e / 8 << "," << e % 8 << ")";
  // The layout matters: the wrong placement gives another, predictable product.
  const std::vector<float> wrong = run_mma<D>(m, true);
  int differ = 0;
  for (int e = 0; e < 128; ++e) {
    differ += wrong[e] != want[e] ? 1 : 0;
    EXPECT_EQ(wrong[e], swapped[e]) << "swapped registers, D(" << e / 8 << "," << e % 8 << ")";
  }
  EXPECT_GT(differ, 64) << "swapping a[1] and a[2] should change most of D";
}

TEST(Primitives, MmaFp16IntegersExactAndLayoutMatters) { check_integer_mma<Fp16>(); }
TEST(Primitives, MmaBf16IntegersExactAndLayoutMatters) { check_integer_mma<Bf16>(); }

// --- 4. ldmatrix ------------------------------------------------------------------

// Row r of matrix m (m = 4 is a decoy that no lane may receive) lives in the
// 16-byte slot (8m + r) * 5 mod 64 of shared memory: aligned, scattered.
constexpr i32 ldm_slot(i32 m, i32 r) { return (8 * m + r) * 5 % 64; }
constexpr u16 ldm_value(i32 m, i32 r, i32 c) { return static_cast<u16>(((m + 1) << 12) | (r << 8) | (c << 4) | 9); }
constexpr int kLdmVariants = 6;  // x1, x2, x4, x1.trans, x2.trans, x4.trans
constexpr int kLdmMatrices[kLdmVariants] = {1, 2, 4, 1, 2, 4};
constexpr u32 kUnwritten = 0xDEADBEEFU;

struct LdmatrixParams {
  u32* out;  // [variant][lane][register]
};

ATTUNE_KERNEL void ldmatrix_kernel(LdmatrixParams p) {
  u16* smem = dev::shared_memory<u16>();
  const i32 lane = dev::lane_id();
  for (i32 e = lane; e < 5 * 64; e += 32) {
    dev::store_shared(smem + ldm_slot(e / 64, (e / 8) % 8) * 8 + e % 8, ldm_value(e / 64, (e / 8) % 8, e % 8));
  }
  dev::block::sync();
  // Lanes 8i..8i+7 give the rows of matrix i; lanes past the loaded matrices give decoy rows.
  const auto row = [&](i32 matrices) -> const void* {
    return smem + ldm_slot(lane / 8 < matrices ? lane / 8 : 4, lane % 8) * 8;
  };
  const auto store = [&](i32 variant, const u32* r, i32 n) {
    for (i32 i = 0; i < n; ++i) dev::store_global(p.out + (variant * 32 + lane) * 4 + i, r[i]);
  };
  u32 r1[1];
  u32 r2[2];
  u32 r4[4];
  dev::warp::ldmatrix_x1(r1, row(1));
  store(0, r1, 1);
  dev::warp::ldmatrix_x2(r2, row(2));
  store(1, r2, 2);
  dev::warp::ldmatrix_x4(r4, row(4));
  store(2, r4, 4);
  dev::warp::ldmatrix_x1_trans(r1, row(1));
  store(3, r1, 1);
  dev::warp::ldmatrix_x2_trans(r2, row(2));
  store(4, r2, 2);
  dev::warp::ldmatrix_x4_trans(r4, row(4));
  store(5, r4, 4);
}

TEST(Primitives, LdmatrixFragmentsAndTranspose) {
  std::vector<u32> out(kLdmVariants * 32 * 4, kUnwritten);
  Emulator emu;
  ASSERT_TRUE(launch(emu, &ldmatrix_kernel, {1, 1, 1}, {32, 1, 1}, LdmatrixParams{reg(emu, "out", out)}, 64 * 16));
  std::vector<u32> want(out.size(), kUnwritten);
  for (int v = 0; v < kLdmVariants; ++v) {
    const bool trans = v >= 3;
    for (int lane = 0; lane < 32; ++lane) {
      // ISA ldmatrix .m8n8 .b16 fragment: lane L holds (row L/4, cols 2*(L%4) and +1)
      // of matrix i in register i, the lower column in the low half; .trans
      // delivers the same positions of the transposed matrix.
      const int r = lane / 4;
      const int c = 2 * (lane % 4);
      for (int m = 0; m < kLdmMatrices[v]; ++m) {
        want[(v * 32 + lane) * 4 + m] = trans ? pack_pair(ldm_value(m, c, r), ldm_value(m, c + 1, r))
                                              : pack_pair(ldm_value(m, r, c), ldm_value(m, r, c + 1));
      }
    }
  }
  expect_equal(out, want, "ldmatrix registers [variant][lane][reg]");
}

// --- 5. cp.async -------------------------------------------------------------------

constexpr int kCopyThreads = 32;
struct CopyParams {
  const Vec16* src;
  const Vec16* src2;
  Vec16* out;
  Vec16* out2;
  i32 mode;  // single group: source sizes by thread; two groups: 1 reads group 2 early (a bug)
};

i32 single_copy_size(i32 t, i32 mode) { return mode == 0 ? (t % 3 == 0 ? 16 : t % 3 == 1 ? 8 : 0) : t % 17; }

ATTUNE_KERNEL void copy_kernel(CopyParams p) {
  Vec16* smem = dev::shared_memory<Vec16>();
  const i32 t = dev::thread_index().x;
  dev::cp_async::copy16(smem + t, p.src + t, single_copy_size(t, p.mode));
  dev::cp_async::commit();
  dev::cp_async::wait<0>();
  dev::block::sync();
  dev::store_global(p.out + t, dev::load_shared(smem + (t + 5) % kCopyThreads));
}

ATTUNE_KERNEL void copy_two_groups_kernel(CopyParams p) {
  Vec16* smem = dev::shared_memory<Vec16>();
  const i32 t = dev::thread_index().x;
  dev::cp_async::copy16(smem + t, p.src + t, 16);
  dev::cp_async::commit();
  dev::cp_async::copy16(smem + kCopyThreads + t, p.src2 + t, 16);
  dev::cp_async::commit();
  dev::cp_async::wait<1>();  // the first group has landed; the second may be in flight
  dev::block::sync();
  dev::store_global(p.out + t, dev::load_shared(smem + (t + 7) % kCopyThreads));
  if (p.mode == 1) dev::store_global(p.out2 + t, dev::load_shared(smem + kCopyThreads + t));  // too early
  dev::cp_async::wait<0>();
  dev::block::sync();
  dev::store_global(p.out2 + t, dev::load_shared(smem + kCopyThreads + (t + 7) % kCopyThreads));
}

std::vector<Vec16> byte_pattern(int salt) {
  std::vector<Vec16> v(kCopyThreads);
  for (int i = 0; i < kCopyThreads * 16; ++i) {
    const auto byte = static_cast<unsigned char>(1 + (i * 37 + salt) % 255);  // never zero
    std::memcpy(reinterpret_cast<unsigned char*>(v.data()) + i, &byte, 1);
  }
  return v;
}

// Bytes [0, size) of `chunk`, then zero-fill.
std::vector<unsigned> expected_chunk(const Vec16& chunk, int size) {
  unsigned char bytes[16] = {};
  std::memcpy(bytes, &chunk, static_cast<std::size_t>(size));
  return {bytes, bytes + 16};
}
std::vector<unsigned> chunk_bytes(const Vec16& v) { return expected_chunk(v, 16); }

void check_single_group(i32 mode) {
  std::vector<Vec16> src = byte_pattern(3);
  std::vector<Vec16> out(kCopyThreads, Vec16{{kUnwritten, kUnwritten, kUnwritten, kUnwritten}});
  Emulator emu;
  // Mode 0: the last thread copies 8 bytes, and only those 8 are inside the registered source.
  const CopyParams params{reg(emu, "src", src, mode == 0 ? (kCopyThreads - 1) * 16 + 8 : 0), nullptr,
                          reg(emu, "out", out), nullptr, mode};
  ASSERT_TRUE(launch(emu, &copy_kernel, {1, 1, 1}, {kCopyThreads, 1, 1}, params, kCopyThreads * 16));
  for (int t = 0; t < kCopyThreads; ++t) {
    const int from = (t + 5) % kCopyThreads;
    expect_equal(chunk_bytes(out[t]), expected_chunk(src[from], single_copy_size(from, mode)),
                 "thread " + std::to_string(t) + " reads chunk " + std::to_string(from));
  }
}

TEST(Primitives, CpAsyncCopiesAndZeroFills) { check_single_group(0); }

// The ISA allows any src-size up to cp-size (16) and requires alignment to
// cp-size only: a 16-byte aligned source with src-size 3, 5, 6, 7, 9-15 is
// fine. (The emulator once checked alignment to src-size.)
TEST(Primitives, CpAsyncAnySourceSize) { check_single_group(1); }

TEST(Primitives, CpAsyncWaitGroupLandsOldestFirst) {
  std::vector<Vec16> src = byte_pattern(1);
  std::vector<Vec16> src2 = byte_pattern(100);
  std::vector<Vec16> out(kCopyThreads);
  std::vector<Vec16> out2(kCopyThreads);
  Emulator emu;
  const CopyParams params{reg(emu, "src", src), reg(emu, "src2", src2), reg(emu, "out", out), reg(emu, "out2", out2),
                          0};
  ASSERT_TRUE(launch(emu, &copy_two_groups_kernel, {1, 1, 1}, {kCopyThreads, 1, 1}, params, 2 * kCopyThreads * 16));
  for (int t = 0; t < kCopyThreads; ++t) {
    const int from = (t + 7) % kCopyThreads;
    expect_equal(chunk_bytes(out[t]), chunk_bytes(src[from]), "group 1 after wait<1>, thread " + std::to_string(t));
    expect_equal(chunk_bytes(out2[t]), chunk_bytes(src2[from]), "group 2 after wait<0>, thread " + std::to_string(t));
  }
  // Reading the second group's destination between wait<1> and wait<0> is reported.
  try {
    emu.launch(&copy_two_groups_kernel, LaunchConfig{{1, 1, 1}, {kCopyThreads, 1, 1}, 2 * kCopyThreads * 16},
               CopyParams{src.data(), src2.data(), out.data(), out2.data(), 1});
    ADD_FAILURE() << "reading a cp.async group before wait<0> was not reported";
  } catch (const emu::KernelFault& fault) {
    EXPECT_TRUE(fault.has(emu::BugKind::kAsyncCopyReadBeforeWait)) << fault.what();
  }
}

// --- 6. exp2, atomics, vector accesses, conversions ---------------------------------

struct MapParams {
  const float* x;
  float* y;
  i32 n;
};

ATTUNE_KERNEL void exp2_kernel(MapParams p) {
  for (i32 i = dev::thread_index().x; i < p.n; i += dev::block_dim().x) {
    dev::store_global(p.y + i, dev::exp2_approx(dev::load_global(p.x + i)));
  }
}

TEST(Primitives, Exp2ApproxAccuracyAndFlushToZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.0F,    -0.0F,  1.0F,   -1.0F,  0.5F,    -126.0F, -126.5F, -149.0F,
                          -150.0F, 127.5F, 128.0F, 200.0F, -200.0F, 1e-40F,  -1e-40F, 1e-7F};
  x.insert(x.end(), {inf, -inf, nan});
  for (int k = 0; k < 1800; ++k) x.push_back(-155.0F + static_cast<float>(k) * 0.173F);
  std::vector<float> y(x.size(), -1.0F);
  Emulator emu;
  const MapParams params{reg(emu, "x", x), reg(emu, "y", y), static_cast<i32>(x.size())};
  ASSERT_TRUE(launch(emu, &exp2_kernel, {1, 1, 1}, {128, 1, 1}, params));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << "exp2(NaN)";
      continue;
    }
    const double want = std::exp2(static_cast<double>(x[i]));
    if (want > static_cast<double>(std::numeric_limits<float>::max())) {
      EXPECT_EQ(y[i], inf) << "exp2(" << x[i] << ")";
    } else if (want < static_cast<double>(std::numeric_limits<float>::min())) {
      // .ftz: a subnormal result flushes to sign-preserving zero (here +0).
      EXPECT_EQ(std::bit_cast<u32>(y[i]), 0U) << "exp2(" << x[i] << ") = " << y[i];
    } else {
      EXPECT_LT(std::fabs(y[i] - want) / want, std::ldexp(1.0, -21)) << "exp2(" << x[i] << ") = " << y[i];
    }
  }
}

ATTUNE_KERNEL void log2_kernel(MapParams p) {
  for (i32 i = dev::thread_index().x; i < p.n; i += dev::block_dim().x) {
    dev::store_global(p.y + i, i == 0 ? dev::infinity() : dev::log2_approx(dev::load_global(p.x + i)));
  }
}

// lg2.approx.ftz.f32: subnormal inputs count as zero; log2(0) = -Inf, log2(negative) = NaN, log2(+Inf) = +Inf.
// Slot 0 holds dev::infinity() instead.
TEST(Primitives, Log2ApproxAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0F, 0.0F, -0.0F, 1e-40F, -1.0F, inf, 1.0F, 0x1p-126F, 0x1p127F, 0.999999F, 1.000001F};
  for (int k = 0; k < 1500; ++k) x.push_back(std::ldexp(1.0F + static_cast<float>(k % 97) / 97.0F, k / 10 - 75));
  std::vector<float> y(x.size(), 0.5F);
  Emulator emu;
  const MapParams params{reg(emu, "x", x), reg(emu, "y", y), static_cast<i32>(x.size())};
  ASSERT_TRUE(launch(emu, &log2_kernel, {1, 1, 1}, {128, 1, 1}, params));
  EXPECT_EQ(y[0], inf) << "dev::infinity()";
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(y[i], -inf) << "log2(" << x[i] << ")";
  EXPECT_TRUE(std::isnan(y[4])) << "log2(-1)";
  EXPECT_EQ(y[5], inf) << "log2(+Inf)";
  for (std::size_t i = 6; i < x.size(); ++i) {
    const double want = std::log2(static_cast<double>(x[i]));
    // Within 2^-21 relative, or absolute near log2(x) = 0.
    EXPECT_LE(std::fabs(y[i] - want), std::ldexp(1.0, -21) * std::max(1.0, std::fabs(want))) << "log2(" << x[i] << ")";
  }
}

struct AtomicParams {
  float* counters;
};

ATTUNE_KERNEL void atomic_kernel(AtomicParams p) {
  const i32 gid = dev::block_index().x * dev::block_dim().x + dev::thread_index().x;
  dev::atomic_add(p.counters + gid % 5, static_cast<float>(gid % 7 + 1));
  dev::atomic_add(p.counters + 5, 0.25F);
}

TEST(Primitives, AtomicAddSumsEveryThread) {
  std::vector<float> counters(6, 0.0F);
  Emulator emu;
  ASSERT_TRUE(launch(emu, &atomic_kernel, {4, 1, 1}, {128, 1, 1}, AtomicParams{reg(emu, "counters", counters)}));
  std::vector<float> want(6, 0.0F);
  long long sums[5] = {};
  for (int gid = 0; gid < 512; ++gid) sums[gid % 5] += gid % 7 + 1;
  for (int k = 0; k < 5; ++k) want[k] = static_cast<float>(sums[k]);
  want[5] = 128.0F;
  expect_equal(counters, want, "counters");
}

struct TicketParams {
  i32* counters;  // [0]: the next ticket; [1]: counts down by 3; [2]: starts at INT_MAX
  i32* tickets;   // per thread of the grid
  i32* olds;      // per thread: what counters[1] held before its add; [grid]: counters[2] before the wrap
};

// The tickets of a dynamic tile scheduler: every thread of every block draws one.
ATTUNE_KERNEL void ticket_kernel(TicketParams p) {
  const i32 gid = dev::block_index().x * dev::block_dim().x + dev::thread_index().x;
  dev::store_global(p.tickets + gid, dev::atomic_fetch_add(p.counters, 1));
  dev::store_global(p.olds + gid, dev::atomic_fetch_add(p.counters + 1, -3));
  if (gid == 0)
    dev::store_global(p.olds + dev::grid_dim().x * dev::block_dim().x, dev::atomic_fetch_add(p.counters + 2, 1));
}

TEST(Primitives, AtomicFetchAddReturnsEachThreadADistinctOldValue) {
  constexpr int kThreads = 4 * 128;
  std::vector<i32> counters = {0, 7, std::numeric_limits<i32>::max()};
  std::vector<i32> tickets(kThreads, -1);
  std::vector<i32> olds(kThreads + 1, 0);
  Emulator emu;
  const TicketParams params{reg(emu, "counters", counters), reg(emu, "tickets", tickets), reg(emu, "olds", olds)};
  ASSERT_TRUE(launch(emu, &ticket_kernel, {4, 1, 1}, {128, 1, 1}, params));
  EXPECT_EQ(counters[0], kThreads);
  EXPECT_EQ(counters[1], 7 - 3 * kThreads);
  EXPECT_EQ(counters[2], std::numeric_limits<i32>::min()) << "wraps as on the GPU";
  EXPECT_EQ(olds[kThreads], std::numeric_limits<i32>::max());
  std::vector<i32> sorted = tickets;
  std::sort(sorted.begin(), sorted.end());
  std::vector<i32> want(kThreads);
  std::iota(want.begin(), want.end(), 0);
  expect_equal(sorted, want, "sorted tickets");
  // The emulator runs a thread's two adds with no switch between them: the
  // second one's old value follows from the ticket.
  for (int g = 0; g < kThreads; ++g) {
    EXPECT_EQ(olds[static_cast<std::size_t>(g)], 7 - 3 * tickets[static_cast<std::size_t>(g)]) << "thread " << g;
  }
}

struct VecParams {
  const Vec16* src;
  Vec16* dst;
};

// Global -> shared -> (another thread) -> global, 16 bytes at a time.
ATTUNE_KERNEL void vec16_kernel(VecParams p) {
  Vec16* smem = dev::shared_memory<Vec16>();
  const i32 t = dev::thread_index().x;
  const i32 base = dev::block_index().x * dev::block_dim().x;
  dev::store_shared(smem + t, dev::load_global(p.src + base + t));
  dev::block::sync();
  dev::store_global(p.dst + base + t, dev::load_shared(smem + (dev::block_dim().x - 1 - t)));
}

TEST(Primitives, Vec16LoadsAndStores) {
  std::vector<Vec16> src(128);
  std::vector<Vec16> dst(128);
  for (u32 i = 0; i < 128; ++i) src[i] = Vec16{{i * 4 + 0x01000000U, i * 4 + 0x02000001U, i * 4 + 0x03000002U, ~i}};
  Emulator emu;
  const VecParams params{reg(emu, "src", src), reg(emu, "dst", dst)};
  ASSERT_TRUE(launch(emu, &vec16_kernel, {2, 1, 1}, {64, 1, 1}, params, 64 * 16));
  for (int i = 0; i < 128; ++i) {
    const int from = (i / 64) * 64 + 63 - i % 64;
    for (int w = 0; w < 4; ++w) EXPECT_EQ(dst[i].w[w], src[from].w[w]) << "dst[" << i << "].w[" << w << "]";
  }
}

struct ConvertParams {
  const float* x;  // n values, n even
  u32* bits;       // [i][fp16, bf16]: to_bits
  u32* packed;     // [pair][fp16, bf16]: pack2(x[2p], x[2p+1])
  u32* unpacked;   // [pair][fp16, bf16][lo, hi]: unpack_lo/hi of packed, as bits
  u32* all;        // [pattern][fp16, bf16]: to_float of every 16-bit pattern, as bits
  i32 n;
};

ATTUNE_KERNEL void convert_kernel(ConvertParams p) {
  const i32 step = dev::block_dim().x;
  for (i32 i = dev::thread_index().x; i < p.n; i += step) {
    const float x = dev::load_global(p.x + i);
    const u16 h = dev::to_bits<Fp16>(x);
    const u16 b = dev::to_bits<Bf16>(x);
    dev::store_global(p.bits + 2 * i, static_cast<u32>(h));
    dev::store_global(p.bits + 2 * i + 1, static_cast<u32>(b));
    if (i % 2 == 0) {
      const float hi = dev::load_global(p.x + i + 1);
      const u32 ph = dev::pack2<Fp16>(x, hi);
      const u32 pb = dev::pack2<Bf16>(x, hi);
      dev::store_global(p.packed + i, ph);
      dev::store_global(p.packed + i + 1, pb);
      const u32 unpacked[4] = {
          std::bit_cast<u32>(dev::unpack_lo<Fp16>(ph)), std::bit_cast<u32>(dev::unpack_hi<Fp16>(ph)),
          std::bit_cast<u32>(dev::unpack_lo<Bf16>(pb)), std::bit_cast<u32>(dev::unpack_hi<Bf16>(pb))};
      for (i32 k = 0; k < 4; ++k) dev::store_global(p.unpacked + 2 * i + k, unpacked[k]);
    }
  }
  for (i32 pattern = dev::thread_index().x; pattern < 65536; pattern += step) {
    const auto bits = static_cast<u16>(pattern);
    dev::store_global(p.all + 2 * pattern, std::bit_cast<u32>(dev::to_float<Fp16>(bits)));
    dev::store_global(p.all + 2 * pattern + 1, std::bit_cast<u32>(dev::to_float<Bf16>(bits)));
  }
}

// binary16 from the IEEE 754 definition: bias 15, 10 fraction bits.
float half_value(u16 bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const int fraction = bits & 0x3FF;
  const float sign = (bits & 0x8000) != 0 ? -1.0F : 1.0F;
  if (exponent == 31) return fraction == 0 ? sign * std::numeric_limits<float>::infinity() : std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(fraction), -24);
  return sign * std::ldexp(static_cast<float>(1024 + fraction), exponent - 25);
}

// The bits of `want`, or `got` when both are NaN: payloads are not part of the contract.
u32 allow_nan(u32 got, float want) {
  return std::isnan(want) && std::isnan(std::bit_cast<float>(got)) ? got : std::bit_cast<u32>(want);
}

TEST(Primitives, ConversionsRoundToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  // {value, fp16 bits, bf16 bits}, worked out by hand from the formats.
  struct Known {
    float value;
    u16 half;
    u16 bf16;
  };
  const std::vector<Known> known = {
      {1.0F, 0x3C00, 0x3F80},
      {1.0F + 0x1p-11F, 0x3C00, 0x3F80},             // fp16 tie -> even
      {1.0F + 0x3p-11F, 0x3C02, 0x3F80},             // fp16 tie -> even (up)
      {1.0F + 0x1p-11F + 0x1p-20F, 0x3C01, 0x3F80},  // just above the fp16 tie
      {1.0F + 0x1p-8F, 0x3C04, 0x3F80},              // bf16 tie -> even
      {1.0F + 0x3p-8F, 0x3C0C, 0x3F82},              // bf16 tie -> even (up)
      {-2.5F, 0xC100, 0xC020},
      {-0.0F, 0x8000, 0x8000},
      {65504.0F, 0x7BFF, 0x4780},
      {65519.0F, 0x7BFF, 0x4780},
      {65520.0F, 0x7C00, 0x4780},  // fp16 tie between max and Inf -> Inf
      {0x1p-24F, 0x0001, 0x3380},  // fp16 smallest subnormal
      {0x1p-25F, 0x0000, 0x3300},  // fp16 tie -> even (zero)
      {0x3p-25F, 0x0002, 0x33C0},  // fp16 tie -> even (up)
      {std::numeric_limits<float>::max(), 0x7C00, 0x7F80},
      {inf, 0x7C00, 0x7F80},
      {-inf, 0xFC00, 0xFF80},
  };
  std::vector<float> x;
  for (const Known& k : known) x.push_back(k.value);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  std::mt19937 rng(5);
  std::uniform_int_distribution<u32> any_bits;
  while (x.size() < 4000) x.push_back(std::bit_cast<float>(any_bits(rng)));  // every exponent, a few NaNs
  if (x.size() % 2 != 0) x.push_back(1.0F);
  const auto n = static_cast<i32>(x.size());
  std::vector<u32> bits(2 * x.size()), packed(x.size()), unpacked(2 * x.size()), all(2 * 65536);
  Emulator emu;
  const ConvertParams params{reg(emu, "x", x),           reg(emu, "bits", bits),
                             reg(emu, "packed", packed), reg(emu, "unpacked", unpacked),
                             reg(emu, "all", all),       n};
  ASSERT_TRUE(launch(emu, &convert_kernel, {1, 1, 1}, {256, 1, 1}, params));

  for (std::size_t k = 0; k < known.size(); ++k) {
    EXPECT_EQ(bits[2 * k], known[k].half) << "to_bits<Fp16>(" << known[k].value << ")";
    EXPECT_EQ(bits[2 * k + 1], known[k].bf16) << "to_bits<Bf16>(" << known[k].value << ")";
  }
  // Every value against core/dtype.h (to_bits) and the formats' definitions (to_float); NaN only needs to stay NaN.
  std::vector<u32> want_bits(bits.size()), want_packed(packed.size()), want_unpacked(unpacked.size());
  for (int i = 0; i < n; ++i) {
    const u16 h = float_to_half_bits(x[i]);
    const u16 b = float_to_bfloat16_bits(x[i]);
    want_bits[2 * i] = std::isnan(x[i]) && std::isnan(half_value(static_cast<u16>(bits[2 * i]))) ? bits[2 * i] : h;
    want_bits[2 * i + 1] =
        std::isnan(x[i]) && std::isnan(std::bit_cast<float>(bits[2 * i + 1] << 16)) ? bits[2 * i + 1] : b;
    // pack2(x[2p], x[2p+1]): x[2p] in the low half, as cvt.rn.{f16,bf16}x2.f32 d, hi, lo.
    const int pair = i / 2;
    want_packed[2 * pair] |= want_bits[2 * i] << (16 * (i % 2));
    want_packed[2 * pair + 1] |= want_bits[2 * i + 1] << (16 * (i % 2));
    want_unpacked[4 * pair + i % 2] =
        allow_nan(unpacked[4 * pair + i % 2], half_value(static_cast<u16>(want_bits[2 * i])));
    want_unpacked[4 * pair + 2 + i % 2] = want_bits[2 * i + 1] << 16;
  }
  expect_equal(bits, want_bits, "to_bits [value][fp16, bf16]");
  expect_equal(packed, want_packed, "pack2 [pair][fp16, bf16]");
  expect_equal(unpacked, want_unpacked, "unpack [pair][fp16 lo, fp16 hi, bf16 lo, bf16 hi] (bits)");
  std::vector<u32> want_all(all.size());
  for (u32 pattern = 0; pattern < 65536; ++pattern) {
    want_all[2 * pattern] = allow_nan(all[2 * pattern], half_value(static_cast<u16>(pattern)));
    want_all[2 * pattern + 1] = pattern << 16;
  }
  expect_equal(all, want_all, "to_float of every pattern [pattern][fp16, bf16] (bits)");
}

}  // namespace
}  // namespace attune
