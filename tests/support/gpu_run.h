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
#include "tests/support/families.h"

namespace attune::testing {

template <class Launch>
ReferenceOutput run_on_gpu(const Inputs& in, Launch launch) {
  const AttentionProblem& p = in.problem;
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0x7FFF);  // NaN in fp16 and bf16
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  cuda::Driver& driver = cuda::Driver::get();
  cuda::DeviceBuffers device(driver, {{in.q.data(), in.q.size() * 2},
                                      {in.k.data(), in.k.size() * 2},
                                      {in.v.data(), in.v.size() * 2},
                                      {o.data(), o.size() * 2},
                                      {lse.data(), lse.size() * sizeof(float)}});
  launch(AttentionBuffers{device.at(0), device.at(1), device.at(2), device.at(3), static_cast<float*>(device.at(4))});
  driver.synchronize(nullptr);
  driver.copy_to_host(o.data(), device.at(3), o.size() * 2);
  driver.copy_to_host(lse.data(), device.at(4), lse.size() * sizeof(float));
  ReferenceOutput got;
  got.o = widen_bits<double>(p.dtype, o);
  got.lse.assign(lse.begin(), lse.end());
  return got;
}

}  // namespace attune::testing
