// The public API end to end on the emulator backend, and the cuda backend's
// one clear line where no driver exists.
#include "runtime/runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "tests/support/decode_cases.h"
#include "tests/support/families.h"

namespace attune {
namespace {

TEST(RuntimeTest, EmuBackendServesForwardEndToEnd) {
  Runtime runtime({.backend = Backend::kEmu});
  EXPECT_EQ(runtime.device_key(), kEmulatorDeviceKey);
  for (const testing::Family& family : testing::seed_families()) {
    const testing::Inputs in = testing::make_inputs(family);
    std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(in.problem)));
    std::vector<float> lse(static_cast<std::size_t>(lse_extent(in.problem)));
    runtime.forward(in.problem, {in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()});
    ReferenceOutput got;
    for (std::uint16_t bits : o) got.o.push_back(bits_to_float(in.problem.dtype, bits));
    got.lse.assign(lse.begin(), lse.end());
    std::string why;
    EXPECT_TRUE(within_accuracy_rule(got, reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data()),
                                     naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data()), 2.0,
                                     &why))
        << family.name << ": " << why;
  }
  const DispatchChoice choice = runtime.explain(testing::make_inputs(testing::seed_families()[0]).problem);
  EXPECT_EQ(choice.rule, DispatchRule::kHeuristic);
}

TEST(RuntimeTest, BadBuffersAreRejectedBeforeAnyLaunch) {
  Runtime runtime({.backend = Backend::kEmu});
  const testing::Inputs in = testing::make_inputs(testing::seed_families()[0]);
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(in.problem)));
  EXPECT_THROW(runtime.forward(in.problem, {in.q.data(), nullptr, in.v.data(), o.data(), nullptr}), InvalidArgument);
  EXPECT_THROW(runtime.forward(in.problem, {in.q.data(), in.k.data(), in.v.data(),
                                            const_cast<std::uint16_t*>(in.q.data()), nullptr}),
               InvalidArgument);
}

TEST(RuntimeTest, CudaBackendWithoutDriverIsOneClearLine) {
  std::string why;
  if (cuda::Driver::available(&why)) GTEST_SKIP() << "a CUDA driver is present";
  try {
    Runtime runtime({.backend = Backend::kCuda});
    FAIL() << "expected DriverUnavailable";
  } catch (const cuda::DriverUnavailable& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("libcuda.so.1"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace attune
