// Pieces of the tuner's measure() shared across its files (internal to
// tuner/): the forward and decode gate and timing live in tuner.cpp, the
// backward's in backward_task.cpp; both time with time_runs.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_modifiers.h"
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

// Normal random values rounded to the storage dtype, as bit patterns (fp8:
// finite bytes, as float_to_bits saturates).
std::vector<std::uint16_t> random_bits(std::int64_t count, DType dtype, std::mt19937& rng);

// The score modifiers' tensors of a problem in host memory, each empty where
// the problem does not use it: sinks [Hq] uniform in [1, 5], ALiBi slopes the
// standard geometric 2^(-8 (h + 1) / Hq) per query head (the same for every
// sequence with [B, Hq]). A row of the gate's ~90 unit-size scores sums to
// about e^5, so its sink takes from 2% to half of the softmax: a variant that
// mishandles it is far outside the rule (with [-1, 2] it took 5% at most).
struct ModifierInputs {
  std::vector<float> sinks;
  std::vector<float> alibi_slopes;
  ModifierTensors host() const {
    return {sinks.empty() ? nullptr : sinks.data(), alibi_slopes.empty() ? nullptr : alibi_slopes.data()};
  }
};
ModifierInputs modifier_inputs(const AttentionProblem& problem, std::mt19937& rng);

// Random Q, K and V of a problem and its modifiers' tensors: what a task runs on.
struct Inputs {
  // One element per 16-bit slot (float_to_bits): what the references read.
  std::vector<std::uint16_t> q, k, v;
  // fp8 tensors packed as the kernels read them (storage_bytes: one byte an
  // element); empty for 16-bit tensors, whose slots are their stored bytes.
  std::vector<std::uint8_t> q_fp8, k_fp8, v_fp8;
  ModifierInputs modifiers;

  // Q, K and V as the kernels read them: host pointer and bytes.
  cuda::DeviceBuffers::Spec stored_q() const { return stored(q, q_fp8); }
  cuda::DeviceBuffers::Spec stored_k() const { return stored(k, k_fp8); }
  cuda::DeviceBuffers::Spec stored_v() const { return stored(v, v_fp8); }

 private:
  static cuda::DeviceBuffers::Spec stored(const std::vector<std::uint16_t>& slots,
                                          const std::vector<std::uint8_t>& packed) {
    if (!packed.empty()) return {packed.data(), packed.size()};
    return {slots.data(), slots.size() * sizeof(std::uint16_t)};
  }
};

// Draws in.q, in.k and in.v (random_bits; K and V in the problem's k_dtype)
// from `rng`, in that order, and packs the fp8 ones; the caller draws the
// rest after them, so Q, K and V do not depend on it.
void draw_qkv(const AttentionProblem& problem, std::mt19937& rng, Inputs& in);

// An input set in device memory (cuda backend): Q, K and V copied from `in`
// (buffers 0, 1, 2), then `rest`.
std::unique_ptr<cuda::DeviceBuffers> qkv_on_device(cuda::Driver& driver, const Inputs& in,
                                                   std::initializer_list<cuda::DeviceBuffers::Spec> rest);

// The same in device memory on the cuda backend (and a backward's dsink).
using cuda::DeviceModifiers;

// The modifiers of a gate's small instance: the task's, with c at most
// kGateSoftcap. The gate's scores are of unit size, which a cap of c = 30
// hardly bends (a variant that drops it is within the rule's limit there);
// c does not change the code a variant runs, so the gate takes one that
// bends them, and the timed problem keeps the task's.
inline constexpr double kGateSoftcap = 4;
ScoreModifiers gate_modifiers(const ScoreModifiers& modifiers);

// The backward task's parts of measure(): the gate against the fp64
// reference backward with FlashAttention's gradient rule, and the timing
// (with the forward's O and LSE).
bool passes_backward_gate(Runtime& runtime, const Task& task, double* max_error, std::string* why);
Timing time_backward(Runtime& runtime, const Task& task, const TuneOptions& options);

}  // namespace attune::tuner
