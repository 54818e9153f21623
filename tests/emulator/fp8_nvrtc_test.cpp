// The CUDA fp8 primitives (templates/primitives/cuda.h) and templates/fp8.h
// compile with NVRTC for sm_90a into the conversions they exist for: cvt to
// and from .e4m3x2/.e5m2x2 in the PTX, F2FP in the SASS. An sm_80 build
// that instantiates one fails with the primitive's own message. No GPU is
// needed; without NVRTC (or nvdisasm for the SASS) the test skips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "profile/sass.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/jit/nvrtc_library.h"

namespace attune {
namespace {

constexpr const char* kFp8Source = R"cuda(
#include "templates/primitives/primitives.h"

namespace attune {

// Pack a pair, widen it to fp16 and to float: both formats.
template <Fp8 F>
ATTUNE_KERNEL void fp8_round_trip(const float* in, u16* packed, u32* halves, float* out) {
  const i32 i = dev::block_index().x * dev::block_dim().x + dev::thread_index().x;
  const u16 pair = dev::pack_fp8x2<F>(dev::load_global(in + 2 * i), dev::load_global(in + 2 * i + 1));
  dev::store_global(packed + i, pair);
  dev::store_global(halves + i, dev::fp8x2_to_half2<F>(pair));
  dev::store_global(out + i, dev::unpack_fp8x2_lo<F>(pair) + dev::unpack_fp8x2_hi<F>(pair));
}
template __global__ void fp8_round_trip<Fp8::kE4M3>(const float*, u16*, u32*, float*);
template __global__ void fp8_round_trip<Fp8::kE5M2>(const float*, u16*, u32*, float*);

// The host header's own conversions, compiled for the device too.
ATTUNE_KERNEL void fp8_header(const float* in, u16* packed, float* out) {
  const i32 i = dev::block_index().x * dev::block_dim().x + dev::thread_index().x;
  const float x = dev::load_global(in + i);
  const u16 pair = pack_fp8x2(x, -x, Fp8::kE4M3);
  dev::store_global(packed + i, pair);
  dev::store_global(out + i, unpack_fp8x2_hi(pair, Fp8::kE4M3) + fp8_to_float(static_cast<u8>(pair), Fp8::kE5M2) +
                                 static_cast<float>(fp8x2_to_half2_bits(pair, Fp8::kE5M2)));
}

}  // namespace attune
)cuda";

// An sm_80 module that calls an fp8 primitive.
constexpr const char* kSm80Source = R"cuda(
#include "templates/primitives/primitives.h"
namespace attune {
ATTUNE_KERNEL void too_old(float x, u16* out) { dev::store_global(out, dev::pack_fp8x2<Fp8::kE4M3>(x, x)); }
}  // namespace attune
)cuda";

std::vector<std::string> include_source_dir() { return {std::string("-I") + ATTUNE_SOURCE_DIR}; }

// NVRTC's compile of `source`; the reason to skip when no NVRTC loads.
std::string compile(const char* source, const char* name, const char* kernel, const char* arch, CompileResult* r) {
  try {
    *r = compile_with_nvrtc(source, name, kernel, arch, include_source_dir());
  } catch (const nvrtc::NvrtcUnavailable& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8NvrtcTest, ConversionsCompileToF2fpForSm90a) {
  CompileResult r;
  if (const std::string why = compile(kFp8Source, "fp8.cu", "attune::fp8_round_trip<attune::Fp8::kE4M3>", "sm_90a", &r);
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_EQ(r.spill_bytes, 0) << r.log;
  for (const char* instruction :
       {"cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e5m2x2"}) {
    EXPECT_NE(r.ptx.find(instruction), std::string::npos) << instruction << " missing from the PTX";
  }
  profile::SassMix mix;
  try {
    mix = profile::count_sass(profile::disassemble(r.cubin));
  } catch (const Error& e) {
    GTEST_SKIP() << "compiled; SASS not checked: " << e.what();
  }
  // One pack and one widening per format in fp8_round_trip; the header's
  // integer code in fp8_header adds none.
  EXPECT_GE(mix.contains("F2FP") ? mix.at("F2FP") : 0, 4) << "F2FP missing from the SASS";
}

TEST(Fp8NvrtcTest, AnSm80CallFailsWithThePrimitivesMessage) {
  CompileResult r;
  if (const std::string why = compile(kSm80Source, "too_old.cu", "attune::too_old", "sm_80", &r); !why.empty()) {
    GTEST_SKIP() << why;
  }
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.log.find("fp8 conversions need sm_89 or later"), std::string::npos) << r.log;
}

}  // namespace
}  // namespace attune
