#include "runtime/emu_forward.h"

#include "core/error.h"
#include "emulator/emulator.h"
#include "runtime/emu_launch.h"
#include "runtime/flash_decode_params.h"
#include "runtime/flash_fwd_params.h"

namespace attune {

namespace {

std::size_t bytes(int64_t elements, std::size_t size) { return static_cast<std::size_t>(elements) * size; }

// The call's tensors and index arrays, as the emulator checks them.
void register_problem_buffers(emu::Emulator& emulator, const AttentionProblem& problem,
                              const AttentionBuffers& buffers) {
  emulator.register_buffer("Q", buffers.q, bytes(q_extent(problem), 2));
  emulator.register_buffer("K", buffers.k, bytes(k_extent(problem), 2));
  emulator.register_buffer("V", buffers.v, bytes(v_extent(problem), 2));
  emulator.register_buffer("O", buffers.o, bytes(o_extent(problem), 2));
  if (buffers.lse != nullptr) emulator.register_buffer("LSE", buffers.lse, bytes(lse_extent(problem), sizeof(float)));
  const auto register_lengths = [&](const char* name, const std::vector<int32_t>& lengths) {
    if (!lengths.empty()) emulator.register_buffer(name, lengths.data(), lengths.size() * sizeof(int32_t));
  };
  register_lengths("cu_seqlens_q", problem.cu_seqlens_q);
  register_lengths("cu_seqlens_k", problem.cu_seqlens_k);
  register_lengths("seqlens_k", problem.seqlens_k);
  register_lengths("block_table", problem.block_table);
}

}  // namespace

void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant) {
  validate(problem, buffers);
  // What matters is the parameter block the launch passes, not the name.
  if (variant.kernel->params_type != "attune::FlashFwdParams") {
    throw InvalidArgument("variant " + variant.id() + ": its kernel takes " + std::string(variant.kernel->params_type) +
                          "; expected a forward kernel taking attune::FlashFwdParams (a flash_fwd variant)");
  }
  if (problem.is_paged()) {
    throw InvalidArgument("forward: a paged KV cache; expected the decode operation for paged caches");
  }
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                     emulator_limits());
  if (problem.batch == 0 || max_query_rows(problem) == 0) return;

  emu::Emulator emulator;
  register_problem_buffers(emulator, problem, buffers);
  const FlashFwdParams params = flash_fwd_params(
      problem, buffers, {problem.cu_seqlens_q.data(), problem.cu_seqlens_k.data(), problem.seqlens_k.data()});
  const LaunchConfig config =
      flash_fwd_launch(problem, variant.value("kBlockM"), variant.threads(), variant.shared_bytes());
  launch_on_emulator(variant, problem.dtype, emulator, config, &params);
}

void emulate_decode(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                    int splits) {
  validate(problem, buffers);
  if (variant.kernel->params_type != "attune::FlashDecodeParams") {
    throw InvalidArgument("variant " + variant.id() + ": its kernel takes " + std::string(variant.kernel->params_type) +
                          "; expected a decode kernel taking attune::FlashDecodeParams (a flash_decode variant)");
  }
  check_splits(splits);
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                     emulator_limits());
  if (problem.batch == 0 || problem.seqlen_q == 0) return;

  emu::Emulator emulator;
  register_problem_buffers(emulator, problem, buffers);
  std::vector<float> workspace(static_cast<std::size_t>(decode_workspace_floats(problem, splits)));
  if (!workspace.empty()) emulator.register_buffer("split workspace", workspace.data(), workspace.size() * 4);
  const FlashDecodeParams params = flash_decode_params(
      problem, buffers, {problem.seqlens_k.data(), problem.block_table.data()}, splits, workspace.data());
  launch_on_emulator(variant, problem.dtype, emulator, flash_decode_launch(problem, variant, splits), &params);
  if (splits > 1) {
    const FlashDecodeCombineParams combine = flash_decode_combine_params(problem, buffers, splits, workspace.data());
    launch_on_emulator(decode_combine_variant(), problem.dtype, emulator, flash_decode_combine_launch(problem),
                       &combine);
  }
}

}  // namespace attune
