// `attune attention --backward`: dQ, dK and dV of the forward the flags
// describe, on the reference (fp64), emu or cuda backend.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "cli/attention_command.h"
#include "cli/modifier_inputs.h"
#include "core/problem.h"
#include "runtime/runtime.h"

namespace attune::cli {

// The backward flags are complete and consistent (dO and the three outputs,
// O and LSE given together or not at all); throws InvalidArgument.
void check_backward_flags(const AttentionOptions& options);

// Reads dO (and O, LSE when given), computes the gradients on `backend`
// (nullopt: the fp64 reference, which recomputes O and LSE itself) and
// writes them as float32 in Q's, K's and V's shapes. `storage` holds Q, K
// and V in the problem's dtype, `shapes` their shapes as read; `mods` the
// score modifiers (with sinks, dsink [Hq] goes to --dsink when given).
void run_backward(const AttentionOptions& options, std::optional<Backend> backend, const AttentionProblem& problem,
                  const std::array<std::vector<std::uint16_t>, 3>& storage,
                  const std::array<std::vector<int64_t>, 3>& shapes, const ModifierInputs& mods);

}  // namespace attune::cli
