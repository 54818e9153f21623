#include "runtime/emu_forward.h"

#include "core/error.h"
#include "emulator/emulator.h"
#include "runtime/flash_fwd_params.h"

namespace attune {

void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant) {
  validate(problem, buffers);
  // What matters is the parameter block the launch passes, not the name.
  if (variant.kernel->params_type != "attune::FlashFwdParams") {
    throw InvalidArgument("variant " + variant.id() + ": its kernel takes " + std::string(variant.kernel->params_type) +
                          "; expected a forward kernel taking attune::FlashFwdParams (a flash_fwd variant)");
  }
  check_variant_fits(variant, static_cast<int>(problem.head_dim_k), static_cast<int>(problem.head_dim_v),
                     {.name = "the emulator", .max_shared_bytes = 256 * 1024});
  if (problem.batch == 0 || max_query_rows(problem) == 0) return;

  emu::Emulator emulator;
  const auto bytes = [](int64_t elements, std::size_t size) { return static_cast<std::size_t>(elements) * size; };
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

  const FlashFwdParams params = flash_fwd_params(
      problem, buffers, {problem.cu_seqlens_q.data(), problem.cu_seqlens_k.data(), problem.seqlens_k.data()});
  const LaunchConfig config =
      flash_fwd_launch(problem, variant.value("kBlockM"), variant.threads(), variant.shared_bytes());
  if (!variant.kernel->launch_on_emulator(problem.dtype, variant.values, emulator, config, &params)) {
    throw InvalidArgument("variant " + variant.id() + ": not instantiated for the emulator");
  }
}

}  // namespace attune
