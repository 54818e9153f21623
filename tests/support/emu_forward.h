// Runs a forward- or decode-kernel variant on the emulator for a family's
// inputs and returns its outputs in the reference's layout; checks a forward
// variant against the fp64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "emulator/emulator.h"
#include "reference/accuracy.h"
#include "reference/reference.h"
#include "runtime/launch/emu_backend.h"
#include "tests/support/families.h"

namespace attune::testing {

// Q, K, V, O and LSE of a forward launched by hand, described to the
// emulator (which checks every access against them).
inline void register_forward_buffers(emu::Emulator& emulator, const Inputs& in, std::vector<std::uint16_t>& o,
                                     std::vector<float>& lse) {
  emulator.register_buffer("Q", in.q.data(), in.q.size() * 2);
  emulator.register_buffer("K", in.k.data(), in.k.size() * 2);
  emulator.register_buffer("V", in.v.data(), in.v.size() * 2);
  emulator.register_buffer("O", o.data(), o.size() * 2);
  emulator.register_buffer("LSE", lse.data(), lse.size() * 4);
}

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

// A forward variant's outputs on `in` are within the forward's accuracy rule
// of the fp64 reference (a failure names the variant and `name`); a launch
// that throws is a failure too.
inline void expect_forward_matches_reference(const Variant& variant, const Inputs& in, const std::string& name) {
  const ReferenceOutput want = reference_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  const ReferenceOutput naive = naive_storage_attention(in.problem, in.q.data(), in.k.data(), in.v.data());
  ReferenceOutput got;
  try {
    got = run_on_emulator(in, variant);
  } catch (const Error& e) {
    ADD_FAILURE() << variant.id() << " on " << name << ": " << e.what();
    return;
  }
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(got, want, naive, 2.0, &why)) << variant.id() << " on " << name << ": " << why;
}

}  // namespace attune::testing
