#include "runtime/emu_backward.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "emulator/emulator.h"
#include "runtime/emu_launch.h"
#include "runtime/flash_bwd_params.h"

namespace attune {

namespace {

std::size_t bytes(int64_t elements, std::size_t size) { return static_cast<std::size_t>(elements) * size; }

}  // namespace

void emulate_backward(const AttentionProblem& problem, const BackwardBuffers& buffers, const Variant& variant) {
  validate(problem, buffers);
  // What matters is the parameter block the launch passes, not the name.
  const auto& tunables = variant.kernel->tunables;
  const bool main_kernel =
      std::any_of(tunables.begin(), tunables.end(), [](const TunableSpec& t) { return t.name == "kDqAtomic"; });
  if (variant.kernel->params_type != "attune::FlashBwdParams" || !main_kernel) {
    throw InvalidArgument("variant " + variant.id() + ": expected a flash_bwd variant");
  }
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                     emulator_limits());
  if (problem.batch == 0) return;

  emu::Emulator emulator;
  const auto register_tensor = [&](const char* name, const void* data, int64_t elements, std::size_t size) {
    if (elements > 0) emulator.register_buffer(name, data, bytes(elements, size));
  };
  register_tensor("Q", buffers.q, q_extent(problem), 2);
  register_tensor("K", buffers.k, k_extent(problem), 2);
  register_tensor("V", buffers.v, v_extent(problem), 2);
  register_tensor("O", buffers.o, o_extent(problem), 2);
  register_tensor("dO", buffers.d_o, o_extent(problem), 2);
  register_tensor("LSE", buffers.lse, lse_extent(problem), sizeof(float));
  register_tensor("dQ", buffers.dq, q_extent(problem), 2);
  register_tensor("dK", buffers.dk, k_extent(problem), 2);
  register_tensor("dV", buffers.dv, v_extent(problem), 2);
  const auto register_lengths = [&](const char* name, const std::vector<int32_t>& lengths) {
    if (!lengths.empty()) emulator.register_buffer(name, lengths.data(), lengths.size() * sizeof(int32_t));
  };
  register_lengths("cu_seqlens_q", problem.cu_seqlens_q);
  register_lengths("cu_seqlens_k", problem.cu_seqlens_k);
  register_lengths("seqlens_k", problem.seqlens_k);

  const BackwardWorkspace sizes = backward_workspace(problem, variant);
  std::vector<float> workspace(static_cast<std::size_t>(sizes.total_floats()), std::numeric_limits<float>::quiet_NaN());
  if (!workspace.empty()) emulator.register_buffer("backward workspace", workspace.data(), workspace.size() * 4);
  const FlashBwdParams params = flash_bwd_params(
      problem, buffers, {problem.cu_seqlens_q.data(), problem.cu_seqlens_k.data(), problem.seqlens_k.data()}, variant,
      split_workspace(sizes, workspace.data()));
  launch_on_emulator(bwd_preprocess_variant(), problem.dtype, emulator,
                     flash_bwd_row_launch(problem, bwd_preprocess_variant()), &params);
  launch_on_emulator(variant, problem.dtype, emulator, flash_bwd_launch(problem, variant), &params);
  launch_on_emulator(bwd_dq_convert_variant(), problem.dtype, emulator,
                     flash_bwd_row_launch(problem, bwd_dq_convert_variant()), &params);
}

}  // namespace attune
