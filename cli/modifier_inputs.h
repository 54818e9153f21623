// The score modifiers of `attune attention` (--softcap, --sinks,
// --alibi-slopes): read from NumPy files, checked against the problem, and
// placed where the backend reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/problem.h"
#include "runtime/cuda/device_modifiers.h"

namespace attune::cli {

struct ModifierInputs {
  std::optional<double> softcap;
  std::string sinks_path, slopes_path;
  std::vector<int64_t> sinks_shape, slopes_shape;
  std::vector<float> sinks;         // [Hq]
  std::vector<float> alibi_slopes;  // [Hq] or [B, Hq]

  // The host copies, null where a modifier is off.
  ModifierTensors host() const {
    return {sinks.empty() ? nullptr : sinks.data(), alibi_slopes.empty() ? nullptr : alibi_slopes.data()};
  }
};

// Reads the files (float arrays; sinks 1-D, slopes 1-D or 2-D) and sets
// the modifiers of `options` (the slopes' rank gives their layout).
ModifierInputs read_modifier_inputs(const std::optional<double>& softcap, const std::string& sinks_path,
                                    const std::string& slopes_path, ProblemOptions& options);

// Checks the shapes against the problem ([Hq]; slopes [Hq] or [B, Hq]) and
// the values (finite). Throws InvalidArgument naming the flag and file.
void check_modifier_inputs(const ModifierInputs& inputs, const AttentionProblem& problem);

// The modifiers' tensors in device memory for the cuda backend.
using cuda::DeviceModifiers;

}  // namespace attune::cli
