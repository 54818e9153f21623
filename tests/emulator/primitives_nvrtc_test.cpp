// Compiles the CUDA implementation of the device primitives
// (templates/primitives/cuda.h) with NVRTC for sm_80 and sm_90a, calling every
// primitive of the API, and checks the PTX carries the instructions the
// templates rely on. No GPU is needed: NVRTC compiles for any architecture.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <chrono>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Every primitive at least once; every result reaches global memory so that
// nothing is optimised away. Launch shapes assumed: up to 128 threads a block.
constexpr const char* kPrimitivesSource = R"cuda(
#include "templates/primitives/primitives.h"

using namespace attune;
using namespace attune::dev;

// Indices, global and shared memory of every type, atomics (add, fetch-add), exp2, shuffles.
ATTUNE_KERNEL void memory_and_warp(const u16* in16, const u32* in32, const i32* ini, const float* inf,
                                   const Vec16* inv, u16* out16, u32* out32, i32* outi, float* outf,
                                   Vec16* outv, float* total, i32* tickets) {
  const Dim3 t = thread_index(), b = block_index(), bd = block_dim(), gd = grid_dim();
  const i32 i = t.x;
  const i32 g = b.x * bd.x + i;
  const i32 mirror = bd.x - 1 - i;
  store_shared(shared_memory<Vec16>() + i, load_global(inv + g));
  store_shared(shared_memory<float>() + 512 + i, load_global(inf + g));
  store_shared(shared_memory<u32>() + 640 + i, load_global(in32 + g));
  store_shared(shared_memory<i32>() + 768 + i, load_global(ini + g));
  store_shared(shared_memory<u16>() + 1792 + i, load_global(in16 + g));
  block::sync();
  store_global(outv + g, load_shared(shared_memory<Vec16>() + mirror));
  const float f = load_shared(shared_memory<float>() + 512 + mirror);
  const u32 u = load_shared(shared_memory<u32>() + 640 + mirror);
  const i32 s = load_shared(shared_memory<i32>() + 768 + mirror);
  store_global(out16 + g, load_shared(shared_memory<u16>() + 1792 + mirror));
  store_global(out32 + g, warp::shfl_xor(u, 1) + warp::shfl_idx(u, 0));
  store_global(outi + g, warp::shfl_xor(s, 2) + warp::shfl_idx(s, 3) + t.y + t.z + b.y + b.z + bd.y + bd.z +
                             gd.x + gd.y + gd.z + lane_id() + warp_id() + atomic_fetch_add(tickets, 1));
  const float x = warp::shfl_xor(f, 4) + warp::shfl_idx(f, 5);
  store_global(outf + g, exp2_approx(warp::reduce_max(x)));
  atomic_add(total, warp::reduce_sum(x));
}

// Conversions between float and the 16-bit storage types.
ATTUNE_KERNEL void conversions(const float* in, u32* packed, u16* bits, float* out) {
  const i32 g = block_index().x * block_dim().x + thread_index().x;
  const float lo = load_global(in + 2 * g), hi = load_global(in + 2 * g + 1);
  const u32 h = pack2<Fp16>(lo, hi), bh = pack2<Bf16>(lo, hi);
  store_global(packed + 2 * g, h);
  store_global(packed + 2 * g + 1, bh);
  store_global(bits + 2 * g, to_bits<Fp16>(lo));
  store_global(bits + 2 * g + 1, to_bits<Bf16>(hi));
  store_global(out + g, unpack_lo<Fp16>(h) + unpack_hi<Fp16>(h) + unpack_lo<Bf16>(bh) + unpack_hi<Bf16>(bh) +
                            to_float<Fp16>(static_cast<u16>(h)) + to_float<Bf16>(static_cast<u16>(bh)));
}

// cp.async into shared memory, the six ldmatrix forms and both MMAs: one warp.
ATTUNE_KERNEL void tensor_cores(const Vec16* tiles, i32 bytes, float* out) {
  const i32 lane = lane_id();
  Vec16* smem = shared_memory<Vec16>();
  cp_async::copy16(smem + lane, tiles + lane, bytes);
  cp_async::commit();
  cp_async::copy16(smem + 32 + lane, tiles + 32 + lane, bytes);
  cp_async::commit();
  cp_async::wait<1>();
  cp_async::wait<0>();
  block::sync();
  u32 a[4], a_t[4], b[2], b_t[2], x1[1], x1_t[1];
  warp::ldmatrix_x4(a, smem + lane);
  warp::ldmatrix_x4_trans(a_t, smem + 32 + lane);
  warp::ldmatrix_x2(b, smem + lane % 16);
  warp::ldmatrix_x2_trans(b_t, smem + 32 + lane % 16);
  warp::ldmatrix_x1(x1, smem + lane % 8);
  warp::ldmatrix_x1_trans(x1_t, smem + 32 + lane % 8);
  const float c[4] = {0.0f, 1.0f, 2.0f, static_cast<float>(x1[0] ^ x1_t[0])};
  float d[4], e[4];
  warp::mma_m16n8k16<Fp16>(d, a, b, c);
  warp::mma_m16n8k16<Bf16>(e, a_t, b_t, d);
  for (i32 k = 0; k < 4; ++k) store_global(out + 4 * lane + k, e[k]);
}
)cuda";

// A call to a primitive that does not exist, on line 4 of the source.
constexpr const char* kBrokenSource = R"cuda(#include "templates/primitives/primitives.h"

ATTUNE_KERNEL void broken(float* out) {
  out[0] = attune::dev::warp::reduce_product(out[0]);
}
)cuda";

struct Compiled {
  nvrtcResult result = NVRTC_ERROR_INTERNAL_ERROR;
  std::string log;
  std::string ptx;  // empty when NVRTC gives none (real architectures)
  std::vector<char> cubin;
  double seconds = 0.0;
};

Compiled compile(const char* source, const char* name, const std::string& arch, bool verbose_ptxas) {
  Compiled out;
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source, name, 0, nullptr, nullptr) != NVRTC_SUCCESS) return out;
  const std::string include = std::string("-I") + ATTUNE_SOURCE_DIR;
  const std::string gpu = "--gpu-architecture=" + arch;
  std::vector<const char*> options = {"--std=c++20", include.c_str(), gpu.c_str()};
  if (verbose_ptxas) options.push_back("--ptxas-options=-v");
  const auto start = std::chrono::steady_clock::now();
  out.result = nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
    out.log.resize(size);
    nvrtcGetProgramLog(program, out.log.data());
    out.log.resize(size - 1);  // drop the terminating NUL
  }
  if (out.result == NVRTC_SUCCESS) {
    if (nvrtcGetPTXSize(program, &size) == NVRTC_SUCCESS && size > 1) {
      out.ptx.resize(size);
      nvrtcGetPTX(program, out.ptx.data());
      out.ptx.resize(size - 1);
    }
    if (nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS && size > 0) {
      out.cubin.resize(size);
      nvrtcGetCUBIN(program, out.cubin.data());
    }
  }
  nvrtcDestroyProgram(&program);
  return out;
}

struct Arch {
  const char* real;      // SASS and the ptxas resource report
  const char* virtual_;  // PTX
};
void PrintTo(const Arch& arch, std::ostream* os) { *os << arch.real; }

class PrimitivesNvrtcTest : public ::testing::TestWithParam<Arch> {};

TEST_P(PrimitivesNvrtcTest, CompilesToTheExpectedInstructions) {
  int major = 0, minor = 0;
  ASSERT_EQ(nvrtcVersion(&major, &minor), NVRTC_SUCCESS);
  std::cout << "NVRTC " << major << "." << minor << "\n";

  const Compiled sass = compile(kPrimitivesSource, "primitives.cu", GetParam().real, true);
  ASSERT_EQ(sass.result, NVRTC_SUCCESS) << nvrtcGetErrorString(sass.result) << "\n" << sass.log;
  EXPECT_FALSE(sass.cubin.empty()) << "no cubin for " << GetParam().real;
  std::cout << GetParam().real << ": " << sass.seconds << " s, cubin " << sass.cubin.size() << " bytes\n";

  // ptxas -v: "Compiling entry function 'k' for 'sm_80'" then "Used N registers, ...".
  const std::regex entry(R"(Compiling entry function '(\w+)')"), used(R"(Used (\d+) registers)");
  std::string kernel;
  int reports = 0;
  std::istringstream lines(sass.log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, entry)) kernel = match[1];
    if (!std::regex_search(line, match, used)) continue;
    ++reports;
    std::cout << "  " << kernel << ": " << match[1] << " registers\n";
    RecordProperty(std::string(GetParam().real) + "_" + kernel + "_registers", match[1].str());
  }
  EXPECT_EQ(reports, 3) << "expected a ptxas register report per kernel:\n" << sass.log;

  // NVRTC 13 gives PTX for a real architecture too; should one not, compile
  // again for the matching virtual architecture.
  const bool recompile = sass.ptx.empty();
  const Compiled ptx = recompile ? compile(kPrimitivesSource, "primitives.cu", GetParam().virtual_, false) : sass;
  ASSERT_EQ(ptx.result, NVRTC_SUCCESS) << nvrtcGetErrorString(ptx.result) << "\n" << ptx.log;
  std::cout << "PTX " << ptx.ptx.size() << " bytes from "
            << (recompile ? std::string(GetParam().virtual_) + " (" + std::to_string(ptx.seconds) + " s)"
                          : std::string("the same compile"))
            << "\n";
  for (const char* instruction : {
           "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
           "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
           "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
           "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
           "cp.async.cg.shared.global",
           "cp.async.wait_group 1",
           "ex2.approx.ftz.f32",
           "shfl.sync.bfly",
           "shfl.sync.idx",
           "bar.sync",
           "red.global.add.f32",
           "atom.global.add.s32",
           "cvt.rn.bf16x2.f32",
           "cvt.rn.f16x2.f32",
       }) {
    EXPECT_NE(ptx.ptx.find(instruction), std::string::npos) << instruction << " missing from the PTX";
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, PrimitivesNvrtcTest,
                         ::testing::Values(Arch{"sm_80", "compute_80"}, Arch{"sm_90a", "compute_90a"}),
                         [](const ::testing::TestParamInfo<Arch>& p) { return std::string(p.param.real); });

// The check can fail: an undefined primitive is a compile error naming its line.
TEST(PrimitivesNvrtcBrokenTest, UndefinedPrimitiveFailsWithItsLine) {
  const Compiled broken = compile(kBrokenSource, "broken.cu", "sm_80", false);
  ASSERT_EQ(broken.result, NVRTC_ERROR_COMPILATION) << broken.log;
  EXPECT_NE(broken.log.find("broken.cu(4): error"), std::string::npos) << broken.log;
  EXPECT_NE(broken.log.find("reduce_product"), std::string::npos) << broken.log;
}

}  // namespace
