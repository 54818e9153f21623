// Runs a forward- or decode-kernel variant on the emulator for a family's
// inputs and returns its outputs in the reference's layout.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "reference/reference.h"
#include "runtime/launch/emu_backend.h"
#include "tests/support/families.h"

namespace attune::testing {

// splits 0: the forward kernel; otherwise the decode kernel with that many splits.
// `mods`: the score modifiers' tensors the problem uses.
inline ReferenceOutput run_on_emulator(const Inputs& in, const Variant& variant, int splits = 0,
                                       const ModifierTensors& mods = {}) {
  const AttentionProblem& p = in.problem;
  // NaN everywhere first: an output the kernel forgets to write shows up.
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  const AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(),      o.data(),
                                 lse.data(),  mods.sinks,  mods.alibi_slopes};
  if (splits == 0) {
    emulate_forward(p, buffers, variant);
  } else {
    emulate_decode(p, buffers, variant, splits);
  }
  ReferenceOutput out;
  out.o.resize(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) out.o[i] = bits_to_float(p.dtype, o[i]);
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

}  // namespace attune::testing
