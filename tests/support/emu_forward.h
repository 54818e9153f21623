// Runs a forward-kernel variant on the emulator for a family's inputs and
// returns its outputs in the reference's layout.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/emulator.h"
#include "reference/reference.h"
#include "runtime/flash_fwd_params.h"
#include "templates/flash_fwd.cuh"
#include "tests/support/families.h"

namespace attune::testing {

template <class Config>
ReferenceOutput run_flash_fwd_on_emulator(const Inputs& in) {
  const AttentionProblem& p = in.problem;
  // NaN everywhere first: an output the kernel forgets to write shows up.
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN());
  emu::Emulator emulator;
  const auto reg = [&](const char* name, const auto& v) {
    if (!v.empty()) emulator.register_buffer(name, v.data(), v.size() * sizeof(v[0]));
  };
  reg("Q", in.q);
  reg("K", in.k);
  reg("V", in.v);
  reg("O", o);
  reg("LSE", lse);
  reg("cu_seqlens_q", p.cu_seqlens_q);
  reg("cu_seqlens_k", p.cu_seqlens_k);
  reg("seqlens_k", p.seqlens_k);
  const AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()};
  const FlashFwdParams params =
      flash_fwd_params(p, buffers, {p.cu_seqlens_q.data(), p.cu_seqlens_k.data(), p.seqlens_k.data()});
  if (max_query_rows(p) > 0 && p.batch > 0) {
    emulator.launch(&flash_fwd<Config>, flash_fwd_launch(p, Config::kBlockM, Config::kThreads, Config::kSharedBytes),
                    params);
  }
  ReferenceOutput out;
  out.o.resize(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) out.o[i] = bits_to_float(p.dtype, o[i]);
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

}  // namespace attune::testing
