#include "cli/attention_backward.h"

#include <string>
#include <utility>

#include "cli/npy_inputs.h"
#include "cli/problem_flags.h"
#include "core/error.h"
#include "reference/backward.h"
#include "reference/reference.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"

namespace attune::cli {

namespace {

// O and LSE of the forward in the layouts the backward reads: given, or
// computed on the same backend (the reference for the reference backend).
struct ForwardState {
  std::vector<std::uint16_t> o;
  std::vector<float> lse;
};

ForwardState forward_state(const AttentionOptions& opt, std::optional<Backend> backend, Runtime* runtime,
                           const AttentionProblem& p, const std::array<std::vector<std::uint16_t>, 3>& in,
                           const ModifierInputs& mods) {
  ForwardState s;
  if (!opt.o_in_path.empty()) {
    const npy::Array o = read_floats(opt.o_in_path, "O");
    const npy::Array lse = read_floats(opt.lse_in_path, "LSE");
    if (static_cast<int64_t>(o.to_float32().size()) != o_extent(p)) {
      throw InvalidArgument(opt.o_in_path + ": O has " + std::to_string(o.to_float32().size()) +
                            " elements; expected " + std::to_string(o_extent(p)) + ", the shape of O");
    }
    if (static_cast<int64_t>(lse.to_float32().size()) != lse_extent(p)) {
      throw InvalidArgument(opt.lse_in_path + ": LSE has " + std::to_string(lse.to_float32().size()) +
                            " elements; expected " + std::to_string(lse_extent(p)) + ", the shape of LSE");
    }
    s.o = to_storage(o, p.dtype);
    s.lse = lse.to_float32();
    return s;
  }
  s.o.resize(static_cast<std::size_t>(o_extent(p)));
  s.lse.resize(static_cast<std::size_t>(lse_extent(p)));
  if (!backend || *backend == Backend::kEmu) {
    const ModifierTensors host = mods.host();
    if (backend) {
      runtime->forward(
          p, {in[0].data(), in[1].data(), in[2].data(), s.o.data(), s.lse.data(), host.sinks, host.alibi_slopes});
    } else {
      const ReferenceOutput ref = reference_forward(p, in[0].data(), in[1].data(), in[2].data(), host);
      for (std::size_t i = 0; i < s.o.size(); ++i) s.o[i] = float_to_bits(p.dtype, static_cast<float>(ref.o[i]));
      for (std::size_t i = 0; i < s.lse.size(); ++i) s.lse[i] = static_cast<float>(ref.lse[i]);
    }
    return s;
  }
  cuda::Driver& driver = cuda::Driver::get();
  const DeviceModifiers device_mods(driver, mods);
  cuda::run_on_device(
      driver, nullptr, {cuda::in(in[0]), cuda::in(in[1]), cuda::in(in[2]), cuda::out(s.o), cuda::out(s.lse)},
      [&](const std::vector<void*>& d) {
        runtime->forward(
            p, {d[0], d[1], d[2], d[3], static_cast<float*>(d[4]), device_mods.sinks(), device_mods.alibi_slopes()});
      });
  return s;
}

struct Gradients {
  std::vector<float> dq, dk, dv;
  std::vector<float> dsink;  // [Hq] with sinks
};

Gradients from_bits(DType dtype, const std::array<std::vector<std::uint16_t>, 3>& bits) {
  Gradients g;
  std::vector<float>* out[] = {&g.dq, &g.dk, &g.dv};
  for (std::size_t t = 0; t < 3; ++t) *out[t] = widen_bits<float>(dtype, bits[t]);
  return g;
}

Gradients on_runtime(const AttentionOptions& opt, Backend backend, Runtime& runtime, const AttentionProblem& p,
                     const std::array<std::vector<std::uint16_t>, 3>& in, const std::vector<std::uint16_t>& d_o,
                     const ForwardState& fwd, const ModifierInputs& mods) {
  std::vector<float> dsink(p.modifiers.sinks ? static_cast<std::size_t>(p.heads_q) : 0);
  std::array<std::vector<std::uint16_t>, 3> grads = {std::vector<std::uint16_t>(in[0].size()),
                                                     std::vector<std::uint16_t>(in[1].size()),
                                                     std::vector<std::uint16_t>(in[2].size())};
  const auto run = [&](const BackwardBuffers& b) {
    if (opt.variant.empty()) {
      runtime.backward(p, b, {.deterministic = opt.deterministic});
    } else {
      runtime.backward_variant(parse_variant_id(opt.variant), p, b);
    }
  };
  if (backend == Backend::kEmu) {
    const ModifierTensors host = mods.host();
    run({in[0].data(), in[1].data(), in[2].data(), fwd.o.data(), d_o.data(), fwd.lse.data(), grads[0].data(),
         grads[1].data(), grads[2].data(), host.sinks, host.alibi_slopes, dsink.empty() ? nullptr : dsink.data()});
    Gradients g = from_bits(p.dtype, grads);
    g.dsink = std::move(dsink);
    return g;
  }
  cuda::Driver& driver = cuda::Driver::get();
  const DeviceModifiers device_mods(driver, mods);
  cuda::run_on_device(
      driver, nullptr,
      {cuda::in(in[0]), cuda::in(in[1]), cuda::in(in[2]), cuda::in(fwd.o), cuda::in(d_o), cuda::in(fwd.lse),
       cuda::out(grads[0]), cuda::out(grads[1]), cuda::out(grads[2]), cuda::inout(dsink)},
      [&](const std::vector<void*>& d) {
        run({d[0], d[1], d[2], d[3], d[4], static_cast<const float*>(d[5]), d[6], d[7], d[8], device_mods.sinks(),
             device_mods.alibi_slopes(), static_cast<float*>(d[9])});
      });
  Gradients g = from_bits(p.dtype, grads);
  g.dsink = std::move(dsink);
  return g;
}

}  // namespace

void check_backward_flags(const AttentionOptions& o) {
  for (const auto& [flag, value] : {std::pair{"--do", &o.d_o_path}, std::pair{"--dq", &o.dq_path},
                                    std::pair{"--dk", &o.dk_path}, std::pair{"--dv", &o.dv_path}}) {
    if (value->empty()) bad_flag(flag, "(missing)", "a path with --backward");
  }
  if (o.o_in_path.empty() != o.lse_in_path.empty()) {
    bad_flag(o.o_in_path.empty() ? "--lse-in" : "--o-in", o.o_in_path.empty() ? o.lse_in_path : o.o_in_path,
             "--o-in and --lse-in together (or neither: they are computed)");
  }
  if (!o.k_cache_path.empty() || o.splits) {
    bad_flag(!o.k_cache_path.empty() ? "--k-cache" : "--splits",
             !o.k_cache_path.empty() ? o.k_cache_path : std::to_string(*o.splits),
             "no KV cache or splits with --backward (decode has no backward)");
  }
  if (o.deterministic && !o.variant.empty()) {
    bad_flag("--deterministic", "with --variant " + o.variant, "one of them (choose an .at0 variant instead)");
  }
}

void run_backward(const AttentionOptions& o, std::optional<Backend> backend, const AttentionProblem& p,
                  const std::array<std::vector<std::uint16_t>, 3>& in,
                  const std::array<std::vector<int64_t>, 3>& shapes, const ModifierInputs& mods) {
  if (!o.dsink_path.empty() && !p.modifiers.sinks) bad_flag("--dsink", o.dsink_path, "--sinks with it");
  const npy::Array d_o = read_floats(o.d_o_path, "dO");
  if (static_cast<int64_t>(d_o.to_float32().size()) != o_extent(p)) {
    throw InvalidArgument(o.d_o_path + ": dO has " + std::to_string(d_o.to_float32().size()) + " elements; expected " +
                          std::to_string(o_extent(p)) + ", the shape of O");
  }
  const std::vector<std::uint16_t> d_o_bits = to_storage(d_o, p.dtype);
  Gradients g;
  std::optional<Runtime> runtime;
  if (backend) runtime.emplace(RuntimeOptions{.backend = *backend});
  const ForwardState fwd = forward_state(o, backend, runtime ? &*runtime : nullptr, p, in, mods);
  if (backend && runtime) {
    g = on_runtime(o, *backend, *runtime, p, in, d_o_bits, fwd, mods);
  } else {
    // Exact: the fp64 reference recomputes O and LSE from Q, K and V.
    const ReferenceGradients ref =
        reference_backward(p, in[0].data(), in[1].data(), in[2].data(), d_o_bits.data(), mods.host());
    g = {to_float32(ref.dq), to_float32(ref.dk), to_float32(ref.dv), to_float32(ref.dsink)};
  }
  npy::write(o.dq_path, shapes[0], g.dq);
  npy::write(o.dk_path, shapes[1], g.dk);
  npy::write(o.dv_path, shapes[2], g.dv);
  if (!o.dsink_path.empty()) npy::write(o.dsink_path, std::vector<int64_t>{p.heads_q}, g.dsink);
  // The forward's O and LSE as the backward used them, when asked for.
  if (!o.out_path.empty()) {
    std::vector<int64_t> o_shape = shapes[0];
    o_shape.back() = p.head_dim_v;
    npy::write(o.out_path, o_shape, widen_bits<float>(p.dtype, fwd.o));
  }
  if (!o.lse_path.empty()) {
    const std::vector<int64_t> lse_shape = p.is_packed() ? std::vector<int64_t>{p.heads_q, p.seqlen_q}
                                                         : std::vector<int64_t>{p.batch, p.heads_q, p.seqlen_q};
    npy::write(o.lse_path, lse_shape, fwd.lse);
  }
}

}  // namespace attune::cli
