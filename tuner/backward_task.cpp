#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "reference/backward.h"
#include "reference/backward_accuracy.h"
#include "reference/reference.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"
#include "runtime/launch/flash_bwd_params.h"
#include "tuner/timing.h"

namespace attune::tuner {

namespace {

// Q, K, V, dO and the forward's O and LSE (from the fp64 reference on the
// gate's small instance, from the runtime's forward when timing).
struct BackwardInputs : Inputs {
  std::vector<std::uint16_t> o, d_o;
  std::vector<float> lse;
};

BackwardInputs random_inputs(const AttentionProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  BackwardInputs in;
  draw_qkv(p, rng, in);
  in.d_o = random_bits(o_extent(p), p.dtype, rng);
  in.modifiers = modifier_inputs(p, rng);
  in.o.resize(static_cast<std::size_t>(o_extent(p)));
  in.lse.resize(static_cast<std::size_t>(lse_extent(p)));
  return in;
}

// The gradients the kernels store (dsink with sinks), staged through device
// memory on cuda. Outputs start as NaN, so one left unwritten fails the gate.
ReferenceGradients run_backward(Runtime& runtime, const Task& task, const AttentionProblem& p,
                                const BackwardInputs& in) {
  std::vector<std::uint16_t> dq(in.q.size(), 0xFFFF), dk(in.k.size(), 0xFFFF), dv(in.v.size(), 0xFFFF);
  std::vector<float> dsink(p.modifiers.sinks ? static_cast<std::size_t>(p.heads_q) : 0,
                           std::numeric_limits<float>::quiet_NaN());
  if (runtime.backend() == Backend::kEmu) {
    const ModifierTensors mods = in.modifiers.host();
    runtime.backward_variant(
        task.variant, p,
        {in.q.data(), in.k.data(), in.v.data(), in.o.data(), in.d_o.data(), in.lse.data(), dq.data(), dk.data(),
         dv.data(), mods.sinks, mods.alibi_slopes, dsink.empty() ? nullptr : dsink.data()});
  } else {
    cuda::Driver& driver = cuda::Driver::get();
    const DeviceModifiers mods(driver, in.modifiers);
    cuda::run_on_device(driver, nullptr,
                        {cuda::in(in.q), cuda::in(in.k), cuda::in(in.v), cuda::in(in.o), cuda::in(in.d_o),
                         cuda::in(in.lse), cuda::out(dq), cuda::out(dk), cuda::out(dv), cuda::inout(dsink)},
                        [&](const std::vector<void*>& d) {
                          runtime.backward_variant(
                              task.variant, p,
                              {d[0], d[1], d[2], d[3], d[4], static_cast<const float*>(d[5]), d[6], d[7], d[8],
                               mods.sinks(), mods.alibi_slopes(), static_cast<float*>(d[9])});
                        });
  }
  ReferenceGradients g;
  g.dq = widen_bits<double>(p.dtype, dq);
  g.dk = widen_bits<double>(p.dtype, dk);
  g.dv = widen_bits<double>(p.dtype, dv);
  g.dsink.assign(dsink.begin(), dsink.end());
  return g;
}

// dsink against the reference: finite, and off by at most `factor` times
// what O stored in the dtype moves it, plus what fp32 sums may add (1e-5 of
// the sum of |terms|, and 1e-6). The kernel sums e^(sink_h - LSE_i) D_i over
// the rows of head h with D_i = dO_i . O_i of the stored O, the reference
// with the exact one; the rows' shifts are summed in absolute value, so the
// bound holds with a factor of 1 already.
bool within_dsink_rule(const AttentionProblem& p, const BackwardInputs& in, const ReferenceOutput& fwd,
                       const ReferenceGradients& got, const ReferenceGradients& want, double factor, double* max_error,
                       std::string* why) {
  if (got.dsink.size() != want.dsink.size()) {
    *why = "dsink has " + std::to_string(got.dsink.size()) + " elements, want " + std::to_string(want.dsink.size());
    return false;
  }
  bool ok = true;
  for (std::int64_t h = 0; h < p.heads_q; ++h) {
    const auto hh = static_cast<std::size_t>(h);
    double moved = 0;  // sum over the rows of e^(sink - LSE) |D_i(stored O) - D_i(exact O)|
    double size = 0;   // sum over the rows of e^(sink - LSE) sum_d |dO O|
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const SequenceExtent s = p.sequence(b);
      for (std::int64_t row = s.q_begin; row < s.q_begin + s.q_len; ++row) {
        const double weight = std::exp(static_cast<double>(in.modifiers.sinks[hh]) -
                                       fwd.lse[static_cast<std::size_t>(reference_lse_index(p, b, row, h))]);
        const std::int64_t o = reference_o_index(p, b, row, h);
        double shift = 0;
        double terms = 0;
        for (std::int64_t i = o; i < o + p.head_dim_v; ++i) {
          const auto at = static_cast<std::size_t>(i);
          const double d_o = bits_to_float(p.dtype, in.d_o[at]);
          const double stored = bits_to_float(p.dtype, in.o[at]);
          shift += d_o * (stored - fwd.o[at]);
          terms += std::abs(d_o * stored);
        }
        moved += weight * std::abs(shift);
        size += weight * terms;
      }
    }
    const double error = std::abs(got.dsink[hh] - want.dsink[hh]);
    const double limit = factor * moved + 1e-5 * size + 1e-6;
    if (!std::isfinite(got.dsink[hh]) || error > limit) {
      if (ok) {
        *why = "dsink[" + std::to_string(h) + "] = " + std::to_string(got.dsink[hh]) + ", want " +
               std::to_string(want.dsink[hh]) + " (limit " + std::to_string(limit) + ")";
      }
      ok = false;
    }
    if (std::isfinite(error)) *max_error = std::max(*max_error, error);
  }
  return ok;
}

// fp8 inputs have no backward (validate_backward refuses them): a task of
// them fails with the reason instead of reaching a kernel.
void require_backward_dtypes(const Task& task) {
  const AttentionProblem& p = task.problem;
  if (p.has_fp8()) {
    throw InvalidArgument("backward task " + task.variant.id() + ": got " + storage_name(p.dtype, p.kv_dtype) +
                          " inputs; expected fp16 or bf16 (fp8 is a forward and KV-cache format: no fp8 backward)");
  }
}

}  // namespace

// The gate: a small instance of the problem class (odd sizes, two heads at
// most, the same score modifiers) against the fp64 reference backward with
// FlashAttention's rule, and dsink with sinks.
bool passes_backward_gate(Runtime& runtime, const Task& task, double* max_error, std::string* why) {
  require_backward_dtypes(task);
  const AttentionProblem& full = task.problem;
  const std::int64_t s = std::min<std::int64_t>(full.seqlen_q, 77);
  const std::int64_t h = std::min<std::int64_t>(full.heads_kv, 2);
  const AttentionProblem p = make_problem(
      std::vector<std::int64_t>{1, s, h * full.group_size(), full.head_dim_k},
      std::vector<std::int64_t>{1, s + 13, h, full.head_dim_k},
      std::vector<std::int64_t>{1, s + 13, h, full.head_dim_v},
      {.dtype = full.dtype, .mask = full.mask, .scale = full.scale, .modifiers = gate_modifiers(full.modifiers)});
  BackwardInputs in = random_inputs(p, 7);
  const ModifierTensors mods = in.modifiers.host();
  const ReferenceOutput fwd = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), mods);
  for (std::size_t i = 0; i < in.o.size(); ++i) in.o[i] = float_to_bits(p.dtype, static_cast<float>(fwd.o[i]));
  for (std::size_t i = 0; i < in.lse.size(); ++i) in.lse[i] = static_cast<float>(fwd.lse[i]);
  const ReferenceGradients got = run_backward(runtime, task, p, in);
  const ReferenceGradients want = reference_backward(p, in.q.data(), in.k.data(), in.v.data(), in.d_o.data(), mods);
  const ReferenceGradients naive =
      naive_storage_backward(p, in.q.data(), in.k.data(), in.v.data(), in.d_o.data(), mods);
  const GradientErrors e = gradient_errors(got, want);
  double dsink_error = 0;
  std::string dsink_why;
  const bool dsink_ok = !p.modifiers.sinks || within_dsink_rule(p, in, fwd, got, want, 2.0, &dsink_error, &dsink_why);
  *max_error = std::max({e.dq, e.dk, e.dv, dsink_error});
  const bool ok = within_gradient_rule(got, want, naive, p.dtype, 3.0, why);
  if (!dsink_ok) *why += (why->empty() ? "" : "; ") + dsink_why;
  return ok && dsink_ok;
}

Timing time_backward(Runtime& runtime, const Task& task, const TuneOptions& o) {
  require_backward_dtypes(task);
  const AttentionProblem& p = task.problem;
  BackwardInputs sets[2] = {random_inputs(p, 1), random_inputs(p, 2)};
  std::vector<std::uint16_t> dq(sets[0].q.size()), dk(sets[0].k.size()), dv(sets[0].v.size());
  std::vector<float> dsink(p.modifiers.sinks ? static_cast<std::size_t>(p.heads_q) : 0);
  if (runtime.backend() == Backend::kEmu) {
    for (BackwardInputs& in : sets) {
      const ModifierTensors mods = in.modifiers.host();
      runtime.forward(
          p, {in.q.data(), in.k.data(), in.v.data(), in.o.data(), in.lse.data(), mods.sinks, mods.alibi_slopes});
    }
    return time_runs(runtime, o, [&](int set) {
      const BackwardInputs& in = sets[set];
      const ModifierTensors mods = in.modifiers.host();
      runtime.backward_variant(
          task.variant, p,
          {in.q.data(), in.k.data(), in.v.data(), in.o.data(), in.d_o.data(), in.lse.data(), dq.data(), dk.data(),
           dv.data(), mods.sinks, mods.alibi_slopes, dsink.empty() ? nullptr : dsink.data()});
    });
  }
  cuda::Driver& driver = cuda::Driver::get();
  std::vector<std::unique_ptr<cuda::DeviceBuffers>> device;
  std::vector<std::unique_ptr<DeviceModifiers>> device_mods;
  for (const BackwardInputs& in : sets) {
    device.push_back(qkv_on_device(driver, in,
                                   {{nullptr, in.o.size() * 2},
                                    {in.d_o.data(), in.d_o.size() * 2},
                                    {nullptr, in.lse.size() * sizeof(float)},
                                    {nullptr, dq.size() * 2},
                                    {nullptr, dk.size() * 2},
                                    {nullptr, dv.size() * 2}}));
    device_mods.push_back(std::make_unique<DeviceModifiers>(driver, in.modifiers, dsink.size()));
    const cuda::DeviceBuffers& d = *device.back();
    const DeviceModifiers& m = *device_mods.back();
    // O and LSE from the forward, so the backward's exponentials are the real ones.
    runtime.forward(p, {d.at(0), d.at(1), d.at(2), d.at(3), static_cast<float*>(d.at(5)), m.sinks(), m.alibi_slopes()});
  }
  driver.synchronize(nullptr);
  return time_runs(runtime, o, [&](int set) {
    const cuda::DeviceBuffers& d = *device[static_cast<std::size_t>(set)];
    const DeviceModifiers& m = *device_mods[static_cast<std::size_t>(set)];
    runtime.backward_variant(task.variant, p,
                             {d.at(0), d.at(1), d.at(2), d.at(3), d.at(4), static_cast<const float*>(d.at(5)), d.at(6),
                              d.at(7), d.at(8), m.sinks(), m.alibi_slopes(), m.dsink()});
  });
}

}  // namespace attune::tuner
