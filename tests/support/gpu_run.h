// Runs a launch on the GPU over a case's inputs: stages Q, K and V in device
// memory, fills O and LSE with NaN (a kernel that writes nothing fails, even
// on a reused allocation), calls `launch` with device buffers, and returns O
// and LSE in the reference's layout.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "reference/reference.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"
#include "tests/support/families.h"

namespace attune::testing {

template <class Launch>
ReferenceOutput run_on_gpu(const Inputs& in, Launch launch) {
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0x7FFF);  // NaN in fp16 and bf16
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  cuda::Driver& driver = cuda::Driver::get();
  cuda::run_on_device(driver, nullptr,
                      {cuda::in(in.q), cuda::in(in.k), cuda::in(in.v), cuda::inout(o), cuda::inout(lse)},
                      [&](const std::vector<void*>& d) {
                        launch(AttentionBuffers{d[0], d[1], d[2], d[3], static_cast<float*>(d[4])});
                      });
  ReferenceOutput got;
  got.o = widen_bits<double>(p.dtype, o);
  got.lse.assign(lse.begin(), lse.end());
  return got;
}

}  // namespace attune::testing
