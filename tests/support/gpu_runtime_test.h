// What the cuda backend's GPU tests share: a runtime on the GPU (the test
// skips with the driver's reason where there is none) and a launch's O and
// LSE checked against the fp64 reference with FlashAttention's accuracy rule.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/runtime.h"
#include "tests/support/families.h"
#include "tests/support/gpu_run.h"

namespace attune::testing {

class GpuRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::Driver::available(&why)) GTEST_SKIP() << why;
    runtime_ = std::make_unique<Runtime>(RuntimeOptions{.backend = Backend::kCuda});
  }

  // Runs `launch` on the GPU over `in` (see run_on_gpu) and checks its
  // output; `what` names the run in a failure.
  template <class Launch>
  void expect_accurate_on_gpu(const Inputs& in, Launch launch, const std::string& what) {
    const AttentionProblem& p = in.problem;
    const ReferenceOutput got = run_on_gpu(in, launch);
    std::string why;
    EXPECT_TRUE(within_accuracy_rule(got, reference_forward(p, in.q.data(), in.k.data(), in.v.data()),
                                     naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data()), 2.0, &why))
        << what << ": " << why;
  }

  std::unique_ptr<Runtime> runtime_;
};

}  // namespace attune::testing
