#include "cli/attention_command.h"

#include "cli/problem_flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/problem.h"
#include "io/npy.h"
#include "reference/reference.h"
#include "runtime/cuda_driver.h"
#include "runtime/db_tuned_source.h"
#include "runtime/runtime.h"

namespace attune::cli {

namespace {

npy::Array read_floats(const std::string& path, const char* name) {
  npy::Array array = npy::read(path);
  if (array.type == npy::ElementType::kInt32 || array.type == npy::ElementType::kInt64) {
    throw InvalidArgument(path + ": " + name + " has dtype " + std::string(npy::to_string(array.type)) +
                          "; expected a float32 or float16 array");
  }
  return array;
}

std::vector<int32_t> read_lengths(const std::string& path, const char* name) {
  if (path.empty()) return {};
  const npy::Array array = npy::read(path);
  if (array.shape.size() != 1) {
    throw InvalidArgument(path + ": " + name + " has " + std::to_string(array.shape.size()) +
                          " dimensions; expected a 1-D integer array");
  }
  return array.to_int32(path + " (" + name + ")");
}

// Rounds float inputs to the storage dtype (round to nearest even).
std::vector<std::uint16_t> to_storage(const npy::Array& array, DType dtype) {
  const std::vector<float> values = array.to_float32();
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bits(dtype, values[i]);
  return bits;
}

std::vector<float> to_float32(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// The forward kernel through attune::Runtime: the given variant or the
// dispatcher's choice. The cuda backend stages the tensors in device memory.
ReferenceOutput run_on_runtime(Backend backend, const AttentionProblem& problem, const std::vector<std::uint16_t>& q,
                               const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v,
                               const std::string& variant_id, const std::string& db_path) {
  const std::optional<tuning_db::TuningDb> db = open_db_for_dispatch(db_path);
  const std::optional<DbTunedSource> tuned = db ? std::optional<DbTunedSource>(std::in_place, *db) : std::nullopt;
  Runtime runtime({.backend = backend, .tuned = tuned ? &*tuned : nullptr});
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(problem)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(problem)));
  const auto run = [&](const AttentionBuffers& buffers) {
    if (variant_id.empty()) {
      runtime.forward(problem, buffers);
    } else {
      runtime.forward_variant(parse_variant_id(variant_id), problem, buffers);
    }
  };
  if (backend == Backend::kEmu) {
    run({q.data(), k.data(), v.data(), o.data(), lse.data()});
  } else {
    cuda::Driver& driver = cuda::Driver::get();
    cuda::DeviceBuffers device(driver, {{q.data(), q.size() * 2},
                                        {k.data(), k.size() * 2},
                                        {v.data(), v.size() * 2},
                                        {nullptr, o.size() * 2},
                                        {nullptr, lse.size() * sizeof(float)}});
    run({device.at(0), device.at(1), device.at(2), device.at(3), static_cast<float*>(device.at(4))});
    driver.synchronize(nullptr);
    driver.copy_to_host(o.data(), device.at(3), o.size() * 2);
    driver.copy_to_host(lse.data(), device.at(4), lse.size() * sizeof(float));
  }
  ReferenceOutput out;
  out.o.reserve(o.size());
  for (std::uint16_t bits : o) out.o.push_back(bits_to_float(problem.dtype, bits));
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

}  // namespace

CLI::App* add_attention_command(CLI::App& app, AttentionOptions& o) {
  CLI::App* cmd = app.add_subcommand("attention", "Run one attention call on .npy inputs and write O (and LSE)");
  cmd->add_option("--backend", o.backend,
                  "Backend that computes: reference (fp64 oracle), emu (kernel on the CPU emulator) or cuda")
      ->capture_default_str();
  cmd->add_option("--q", o.q_path, "Q: float32/float16 [B,Sq,Hq,Dk], or [Tq,Hq,Dk] with cu_seqlens")->required();
  cmd->add_option("--k", o.k_path, "K: [B,Sk,Hkv,Dk], or [Tk,Hkv,Dk]")->required();
  cmd->add_option("--v", o.v_path, "V: [B,Sk,Hkv,Dv], or [Tk,Hkv,Dv]")->required();
  cmd->add_option("--out", o.out_path, "O output: float32 [B,Sq,Hq,Dv] (packed: [Tq,Hq,Dv])")->required();
  cmd->add_option("--lse", o.lse_path, "LSE output: float32 [B,Hq,Sq] (packed: [Hq,Tq])");
  cmd->add_option("--dtype", o.dtype, "Storage dtype the inputs are rounded to: fp16 or bf16")->capture_default_str();
  cmd->add_option("--causal", o.causal, "Causal mask: bottom-right (j <= i + Sk - Sq) or top-left (j <= i)");
  cmd->add_option("--window", o.window, "Sliding window LEFT,RIGHT around the bottom-right diagonal (-1: unbounded)");
  cmd->add_option("--scale", o.scale, "Softmax scale (default 1/sqrt(Dk))");
  cmd->add_option("--seqlens-k", o.seqlens_k_path, "int32 [B]: keys per batch entry (key padding)");
  cmd->add_option("--cu-seqlens-q", o.cu_seqlens_q_path, "int32 [B+1]: packed query offsets");
  cmd->add_option("--cu-seqlens-k", o.cu_seqlens_k_path, "int32 [B+1]: packed key offsets");
  cmd->add_option("--db", o.db_path, "Tuning database to dispatch from (default: the default one, if it exists)");
  cmd->add_option("--variant", o.variant,
                  "Kernel variant id (emu and cuda backends; default: the dispatcher's choice)");
  return cmd;
}

void run_attention(const AttentionOptions& o) {
  const std::optional<Backend> backend = o.backend == "reference" ? std::nullopt : parse_backend(o.backend);
  if (o.backend != "reference" && !backend) bad_flag("--backend", o.backend, "reference, emu or cuda");
  if (!o.variant.empty() && o.backend == "reference") {
    bad_flag("--variant", o.variant, "no --variant with --backend reference (it has no kernel variants)");
  }
  ProblemOptions options;
  options.dtype = parse_dtype_flag(o.dtype);
  options.mask = parse_mask(o.causal, o.window);
  options.scale = o.scale;
  options.seqlens_k = read_lengths(o.seqlens_k_path, "seqlens_k");
  options.cu_seqlens_q = read_lengths(o.cu_seqlens_q_path, "cu_seqlens_q");
  options.cu_seqlens_k = read_lengths(o.cu_seqlens_k_path, "cu_seqlens_k");
  const DType dtype = options.dtype;

  const npy::Array q = read_floats(o.q_path, "Q");
  const npy::Array k = read_floats(o.k_path, "K");
  const npy::Array v = read_floats(o.v_path, "V");
  const AttentionProblem problem = make_problem(q.shape, k.shape, v.shape, std::move(options));

  const std::vector<std::uint16_t> q_bits = to_storage(q, dtype);
  const std::vector<std::uint16_t> k_bits = to_storage(k, dtype);
  const std::vector<std::uint16_t> v_bits = to_storage(v, dtype);
  const ReferenceOutput out = backend ? run_on_runtime(*backend, problem, q_bits, k_bits, v_bits, o.variant, o.db_path)
                                      : reference_forward(problem, q_bits.data(), k_bits.data(), v_bits.data());

  std::vector<int64_t> o_shape = {problem.seqlen_q, problem.heads_q, problem.head_dim_v};
  std::vector<int64_t> lse_shape = {problem.heads_q, problem.seqlen_q};
  if (!problem.is_packed()) {
    o_shape.insert(o_shape.begin(), problem.batch);
    lse_shape.insert(lse_shape.begin(), problem.batch);
  }
  npy::write(o.out_path, o_shape, to_float32(out.o));
  if (!o.lse_path.empty()) npy::write(o.lse_path, lse_shape, to_float32(out.lse));
}

}  // namespace attune::cli
