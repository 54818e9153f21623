#include "cli/tune_worker_command.h"

#include <cstdio>

#include "cli/problem_flags.h"
#include "core/error.h"
#include "tuner/tuner.h"

namespace attune::cli {

CLI::App* add_tune_worker_command(CLI::App& app, TuneWorkerOptions& o) {
  CLI::App* cmd = app.add_subcommand("tune-worker", "");  // empty description: hidden
  cmd->group("");
  cmd->add_option("--backend", o.backend);
  cmd->add_option("--device", o.device);
  cmd->add_option("--variant", o.variant)->required();
  cmd->add_option("--dtype", o.dtype);
  cmd->add_option("--kv-dtype", o.kv_dtype);  // an fp8 KV cache; empty: --dtype's
  cmd->add_option("--mask", o.mask);
  cmd->add_option("--batch", o.batch);
  cmd->add_option("--seqlen", o.seqlen)->required();
  cmd->add_option("--heads", o.heads);
  cmd->add_option("--seqlen-k", o.seqlen_k);  // default: --seqlen
  cmd->add_option("--heads-kv", o.heads_kv);  // default: --heads
  cmd->add_option("--splits", o.splits);      // > 0: split-KV decode
  cmd->add_option("--op", o.op);
  cmd->add_option("--modifiers", o.modifiers);  // e.g. softcap+sinks; ALiBi slopes per query head
  cmd->add_option("--softcap", o.softcap);
  cmd->add_option("--dropout", o.dropout);  // p, with dropout among the modifiers
  cmd->add_option("--dk", o.dk)->required();
  cmd->add_option("--dv", o.dv)->required();
  cmd->add_option("--warmup", o.warmup);
  cmd->add_option("--repetitions", o.repetitions);
  return cmd;
}

void run_tune_worker(const TuneWorkerOptions& o) {
  tuner::Measurement result;
  try {
    const auto backend = parse_backend(o.backend);
    if (!backend) bad_flag("--backend", o.backend, "cuda or emu");
    Mask mask = Mask::none();
    if (o.mask == "causal-bottom-right") mask = Mask::causal_bottom_right();
    if (o.mask == "causal-top-left") mask = Mask::causal_top_left();
    const std::int64_t seqlen_k = o.seqlen_k > 0 ? o.seqlen_k : o.seqlen;
    const std::int64_t heads_kv = o.heads_kv > 0 ? o.heads_kv : o.heads;
    const std::vector<std::int64_t> shape_q = {o.batch, o.seqlen, o.heads, o.dk};
    const std::vector<std::int64_t> shape_k = {o.batch, seqlen_k, heads_kv, o.dk};
    const std::vector<std::int64_t> shape_v = {o.batch, seqlen_k, heads_kv, o.dv};
    const std::optional<std::uint8_t> bits = parse_modifier_names(o.modifiers);
    if (!bits) bad_flag("--modifiers", o.modifiers, "none, or softcap, sinks, alibi and dropout joined by '+'");
    // The sweep's problem again: tuner::plan builds its modifiers the same way.
    std::optional<DType> kv_dtype;
    if (!o.kv_dtype.empty()) {
      kv_dtype = parse_dtype(o.kv_dtype);
      if (!kv_dtype || !is_fp8(*kv_dtype)) bad_flag("--kv-dtype", o.kv_dtype, "e4m3 or e5m2 (an fp8 KV cache)");
    }
    const ProblemOptions options{.dtype = parse_dtype_flag(o.dtype),
                                 .kv_dtype = kv_dtype,
                                 .mask = mask,
                                 .modifiers = tuner::sweep_modifiers(*bits, o.softcap, o.dropout)};
    const tuner::Task task{make_problem(shape_q, shape_k, shape_v, options), parse_variant_id(o.variant), o.splits,
                           parse_op(o.op).value_or(Op::kForward)};
    Runtime runtime({.backend = *backend, .device = o.device});
    result = tuner::measure(runtime, task, {.warmup = o.warmup, .repetitions = o.repetitions});
  } catch (const Error& e) {
    result.ok = false;
    result.error = e.what();
  }
  std::printf("%s\n", tuner::format_result(result).c_str());
}

}  // namespace attune::cli
