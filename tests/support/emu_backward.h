// Inputs of a backward test and a run of the backward kernels on the
// emulator: the forward's O and LSE come from the fp64 reference (O rounded
// to the storage dtype, LSE to float), so the backward is tested on its own.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "reference/backward.h"
#include "reference/backward_accuracy.h"
#include "reference/reference.h"
#include "runtime/launch/emu_backend.h"
#include "runtime/launch/flash_bwd_params.h"
#include "runtime/launch/flash_bwd_sm90_params.h"
#include "tests/support/families.h"

namespace attune::testing {

struct BackwardInputs {
  Inputs forward;                  // the problem (contiguous layouts), Q, K, V
  std::vector<std::uint16_t> o;    // [B, Sq, Hq, Dv]: the reference's O in the storage dtype
  std::vector<float> lse;          // [B, Hq, Sq]: the reference's LSE
  std::vector<std::uint16_t> d_o;  // [B, Sq, Hq, Dv]: random, like V
};

// A family's inputs with Q, K and V multiplied by the given factors (then
// rounded to the storage dtype), and a random dO.
inline BackwardInputs make_backward_inputs(const Family& family, unsigned seed = 1234, float q_factor = 1.0F,
                                           float k_factor = 1.0F, float v_factor = 1.0F) {
  BackwardInputs in{make_inputs(family, seed), {}, {}, {}};
  const AttentionProblem& p = in.forward.problem;
  const auto multiply = [&](std::vector<std::uint16_t>& t, float factor) {
    if (factor == 1.0F) return;
    for (auto& bits : t) bits = float_to_bits(p.dtype, factor * bits_to_float(p.dtype, bits));
  };
  multiply(in.forward.q, q_factor);
  multiply(in.forward.k, k_factor);
  multiply(in.forward.v, v_factor);
  const ReferenceOutput fwd = reference_forward(p, in.forward.q.data(), in.forward.k.data(), in.forward.v.data());
  for (double x : fwd.o) in.o.push_back(float_to_bits(p.dtype, static_cast<float>(x)));
  for (double x : fwd.lse) in.lse.push_back(static_cast<float>(x));
  std::mt19937 rng(seed + 1);
  in.d_o = random_bits(static_cast<int64_t>(in.o.size()), p.dtype, 0.0F, 1.0F, rng);
  return in;
}

// Whether gradients of `in` are within FlashAttention's rule for them
// (three times the naive storage-dtype backward's error plus a floor), and
// why not.
inline bool gradients_within_rule(const BackwardInputs& in, const ReferenceGradients& got, std::string* why) {
  const AttentionProblem& p = in.forward.problem;
  const ReferenceGradients want =
      reference_backward(p, in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.d_o.data());
  const ReferenceGradients naive =
      naive_storage_backward(p, in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.d_o.data());
  return within_gradient_rule(got, want, naive, p.dtype, 3.0, why);
}

// The gradients as the kernels store them (bit patterns, the problem's
// contiguous layouts).
struct StoredGradients {
  std::vector<std::uint16_t> dq, dk, dv;
  bool operator==(const StoredGradients&) const = default;
};

// Runs the backward of `variant` on the emulator. Outputs start as NaN, so
// an element the kernels forget shows up.
inline StoredGradients run_backward_bits(const BackwardInputs& in, const Variant& variant) {
  const AttentionProblem& p = in.forward.problem;
  StoredGradients g{std::vector<std::uint16_t>(static_cast<std::size_t>(q_extent(p)), 0xFFFF),
                    std::vector<std::uint16_t>(static_cast<std::size_t>(k_extent(p)), 0xFFFF),
                    std::vector<std::uint16_t>(static_cast<std::size_t>(v_extent(p)), 0xFFFF)};
  emulate_backward(p,
                   {in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.o.data(), in.d_o.data(),
                    in.lse.data(), g.dq.data(), g.dk.data(), g.dv.data()},
                   variant);
  return g;
}

// Stored gradients as values in ReferenceGradients' layout (the same as the
// problem's contiguous layouts).
inline ReferenceGradients to_values(DType dtype, const StoredGradients& g) {
  ReferenceGradients out;
  for (std::uint16_t bits : g.dq) out.dq.push_back(bits_to_float(dtype, bits));
  for (std::uint16_t bits : g.dk) out.dk.push_back(bits_to_float(dtype, bits));
  for (std::uint16_t bits : g.dv) out.dv.push_back(bits_to_float(dtype, bits));
  return out;
}

inline ReferenceGradients run_backward_on_emulator(const BackwardInputs& in, const Variant& variant) {
  return to_values(in.forward.problem.dtype, run_backward_bits(in, variant));
}

// One backward call set up on an emulator: the inputs, the gradients (NaN
// to start, so an element the kernels forget shows up) and a NaN workspace,
// registered under their names, and the row kernels' params.
struct EmulatedBackward {
  // `seed`: the emulator's scheduling order (Emulator::Options::schedule_seed).
  EmulatedBackward(const BackwardInputs& in, const Variant& variant, std::uint64_t seed = 0)
      : emulator(emu::Emulator::Options{.schedule_seed = seed}),
        g{std::vector<std::uint16_t>(static_cast<std::size_t>(q_extent(in.forward.problem)), 0xFFFF),
          std::vector<std::uint16_t>(static_cast<std::size_t>(k_extent(in.forward.problem)), 0xFFFF),
          std::vector<std::uint16_t>(static_cast<std::size_t>(v_extent(in.forward.problem)), 0xFFFF)} {
    const AttentionProblem& p = in.forward.problem;
    const auto add = [&](const char* name, const auto& t) {
      if (!t.empty()) emulator.register_buffer(name, t.data(), t.size() * sizeof(t[0]));
    };
    add("Q", in.forward.q);
    add("K", in.forward.k);
    add("V", in.forward.v);
    add("O", in.o);
    add("dO", in.d_o);
    add("LSE", in.lse);
    add("dQ", g.dq);
    add("dK", g.dk);
    add("dV", g.dv);
    add("cu_seqlens_q", p.cu_seqlens_q);
    add("cu_seqlens_k", p.cu_seqlens_k);
    add("seqlens_k", p.seqlens_k);
    const BackwardWorkspace sizes = backward_workspace(p, variant);
    workspace.assign(static_cast<std::size_t>(sizes.total_floats()), std::numeric_limits<float>::quiet_NaN());
    add("workspace", workspace);
    buffers = {in.forward.q.data(), in.forward.k.data(), in.forward.v.data(), in.o.data(), in.d_o.data(),
               in.lse.data(),       g.dq.data(),         g.dk.data(),         g.dv.data()};
    params = flash_bwd_params(p, buffers, {p.cu_seqlens_q.data(), p.cu_seqlens_k.data(), p.seqlens_k.data(), nullptr},
                              variant, split_workspace(sizes, workspace.data()));
  }
  // One of the row kernels (preprocess, convert), the real one.
  void run_row_kernel(const AttentionProblem& p, const Variant& row) {
    ASSERT_TRUE(row.kernel->launch_on_emulator(p.dtype, row.values, emulator, flash_bwd_row_launch(p, row), &params));
  }

  emu::Emulator emulator;
  StoredGradients g;
  std::vector<float> workspace;
  BackwardBuffers buffers;
  FlashBwdParams params{};
};

// A planted bug's run: `main_kernel` (a copy of templates/flash_bwd.cuh with
// one change, made at configure time) in place of the real main kernel of
// `variant`, with the real preprocess and convert kernels.
template <class MutantParams>
ReferenceGradients run_with_main_kernel(const BackwardInputs& in, const Variant& variant,
                                        void (*main_kernel)(MutantParams)) {
  const AttentionProblem& p = in.forward.problem;
  EmulatedBackward call(in, variant);
  call.run_row_kernel(p, bwd_preprocess_variant());
  call.emulator.launch(main_kernel, flash_bwd_launch(p, variant, emulated_sm_count()),
                       std::bit_cast<MutantParams>(call.params));
  call.run_row_kernel(p, bwd_dq_convert_variant());
  return to_values(p.dtype, call.g);
}

// A planted bug's run on flash_bwd_sm90: `preprocess` and `main_kernel`
// (each the real kernel or a copy of its template with one change) with the
// real convert kernel, blocks in the order of `seed`. Q, K, V and dO must
// have rows TMA can step (16-byte strides). The main kernel's fault, when
// `fault` is given, is kept there and the gradients still computed;
// otherwise it is thrown. `workspace`, when given, gets the fp32 workspace
// (D, the dQ accumulator) as the main kernel left it. `ctas` > 0: the main
// kernel's grid, whatever flash_bwd_sm90_ctas would choose (the kernel
// runs any number of CTAs).
template <class PreprocessParams, class MainParams>
ReferenceGradients run_sm90_with_kernels(const BackwardInputs& in, const Variant& variant,
                                         void (*preprocess)(PreprocessParams), void (*main_kernel)(MainParams),
                                         std::uint64_t seed = 0, std::string* fault = nullptr,
                                         std::vector<std::uint32_t>* workspace = nullptr, int ctas = 0) {
  const AttentionProblem& p = in.forward.problem;
  EmulatedBackward call(in, variant, seed);
  const FlashBwdSm90Params sm90 =
      flash_bwd_sm90_params(p, call.buffers, call.params, variant, encode_emulated_tensor_map);
  call.emulator.launch(preprocess, flash_bwd_row_launch(p, bwd_preprocess_variant()),
                       std::bit_cast<PreprocessParams>(call.params));
  try {
    LaunchConfig launch = flash_bwd_launch(p, variant, emulated_sm_count());
    if (ctas > 0) launch.grid.x = ctas;
    call.emulator.launch(main_kernel, launch, std::bit_cast<MainParams>(sm90));
  } catch (const emu::KernelFault& f) {
    if (fault == nullptr) throw;
    *fault = f.what();
  }
  if (workspace != nullptr) {
    workspace->resize(call.workspace.size());
    std::memcpy(workspace->data(), call.workspace.data(), call.workspace.size() * sizeof(float));
  }
  call.run_row_kernel(p, bwd_dq_convert_variant());
  return to_values(p.dtype, call.g);
}

}  // namespace attune::testing
