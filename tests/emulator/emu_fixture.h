// What the emulator's unit tests share: two registered float buffers and a
// launch expected to fail.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "emulator/emulator.h"
#include "templates/primitives/primitives.h"

namespace attune::emu_test {

using emu::BugKind;
using emu::KernelFault;

struct Buffers {
  const float* in;
  float* out;
  i32 n;
};

// Runs a launch expected to fail and returns its fault.
template <class Params>
emu::KernelFault expect_fault(void (*kernel)(Params), const LaunchConfig& config, const Params& params,
                              emu::Emulator& emulator) {
  try {
    emulator.launch(kernel, config, params);
  } catch (const emu::KernelFault& fault) {
    return fault;
  }
  ADD_FAILURE() << "the planted bug was not reported";
  return emu::KernelFault({}, 0);
}

struct Fixture {
  std::vector<float> in;
  std::vector<float> out;
  emu::Emulator emulator;
  explicit Fixture(std::size_t in_size, std::size_t out_size) : in(in_size), out(out_size, 0.0F) {
    std::iota(in.begin(), in.end(), 0.0F);
    emulator.register_buffer("in", in.data(), in.size() * sizeof(float));
    emulator.register_buffer("out", out.data(), out.size() * sizeof(float));
  }
  Buffers params() { return {in.data(), out.data(), static_cast<i32>(in.size())}; }
};

}  // namespace attune::emu_test
