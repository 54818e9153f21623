// Timing and the per-operation measurements of the tuner (internal to
// tuner/): the forward and decode paths live in tuner.cpp, the backward's in
// backward_task.cpp; both time with time_runs.
#pragma once

#include <functional>

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

// measure() of a backward task: the gate against the fp64 reference backward
// with FlashAttention's gradient rule, then timing; TFLOP/s with
// backward_flops (2.5 x the forward's).
Measurement measure_backward(Runtime& runtime, const Task& task, const TuneOptions& options);

}  // namespace attune::tuner
