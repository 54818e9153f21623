// Pieces of the tuner's measure() shared across its files (internal to
// tuner/): the forward and decode gate and timing live in tuner.cpp, the
// backward's in backward_task.cpp; both time with time_runs.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tuner/tuner.h"

namespace attune::tuner {

struct Timing {
  double median_ms;
  double spread_ms;  // max - min
};

// Runs `run(set)` warmup + repetitions times, `set` alternating 0 and 1 (two
// input sets, so repeated runs do not time a warm cache); device events on
// the cuda backend, wall-clock time on the emulator.
Timing time_runs(Runtime& runtime, const TuneOptions& options, const std::function<void(int)>& run);

// Normal random values rounded to the storage dtype, as bit patterns.
std::vector<std::uint16_t> random_bits(std::int64_t count, DType dtype, std::mt19937& rng);

// The backward task's parts of measure(): the gate against the fp64
// reference backward with FlashAttention's gradient rule, and the timing
// (with the forward's O and LSE).
bool passes_backward_gate(Runtime& runtime, const Task& task, double* max_error, std::string* why);
Timing time_backward(Runtime& runtime, const Task& task, const TuneOptions& options);

}  // namespace attune::tuner
