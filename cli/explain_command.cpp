#include "cli/explain_command.h"

#include <cstdio>

#include "cli/problem_flags.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/runtime.h"

namespace attune::cli {

CLI::App* add_explain_command(CLI::App& app, ExplainOptions& o) {
  CLI::App* cmd = app.add_subcommand("explain", "Print the variant a problem would run and the rule that chose it");
  cmd->add_option("--backend", o.backend, "cuda or emu")->capture_default_str();
  cmd->add_option("--device", o.device, "CUDA device ordinal")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "fp16, bf16, or e4m3 / e5m2 (fp8 Q, K and V)")->capture_default_str();
  cmd->add_option("--kv-dtype", o.kv_dtype, "e4m3 or e5m2: an fp8 K and V (KV cache) under --dtype queries");
  cmd->add_option("--batch", o.batch, "B")->capture_default_str();
  cmd->add_option("--seqlen-q", o.seqlen_q, "Sq (required unless --cu-seqlens-q)");
  cmd->add_option("--seqlen-k", o.seqlen_k, "Sk (required unless --cu-seqlens-k)");
  cmd->add_option("--cu-seqlens-q", o.cu_seqlens_q, "Packed queries: B+1 row offsets, e.g. 0,300,305,445")
      ->delimiter(',');
  cmd->add_option("--cu-seqlens-k", o.cu_seqlens_k, "Packed keys: B+1 key offsets (with --cu-seqlens-q)")
      ->delimiter(',');
  cmd->add_option("--heads-q", o.heads_q, "Hq")->capture_default_str();
  cmd->add_option("--heads-kv", o.heads_kv, "Hkv")->capture_default_str();
  cmd->add_option("--dk", o.dk, "head dim of Q and K")->required();
  cmd->add_option("--dv", o.dv, "head dim of V")->required();
  cmd->add_option("--causal", o.causal, "bottom-right or top-left");
  cmd->add_option("--window", o.window, "LEFT,RIGHT around the bottom-right diagonal");
  cmd->add_option("--db", o.db_path, "Tuning database (default: the default one, if it exists)");
  cmd->add_option("--op", o.op, "fwd, bwd, or decode (split-KV over a KV cache of --seqlen-k keys)")
      ->capture_default_str();
  cmd->add_option("--splits", o.splits, "decode: a split count to use instead of the dispatcher's");
  cmd->add_flag("--deterministic", o.deterministic, "bwd: the variant of deterministic mode (dQ in a fixed order)");
  cmd->add_option("--modifiers", o.modifiers, "Score modifiers: none, or softcap, sinks, alibi, dropout joined by '+'");
  cmd->add_option("--softcap", o.softcap, "Softcap c (implies the softcap modifier)");
  return cmd;
}

void run_explain(const ExplainOptions& o) {
  const auto backend = parse_backend(o.backend);
  if (!backend) bad_flag("--backend", o.backend, "cuda or emu");
  const std::optional<Op> op = parse_op(o.op);
  if (!op) bad_flag("--op", o.op, "fwd, bwd or decode");
  if (*op != Op::kDecode && o.splits != 0) bad_flag("--splits", std::to_string(o.splits), "--op decode with it");
  if (*op != Op::kBackward && o.deterministic) bad_flag("--deterministic", "with --op " + o.op, "--op bwd with it");
  const bool packed_q = !o.cu_seqlens_q.empty();
  const bool packed_k = !o.cu_seqlens_k.empty();
  if (!packed_q && o.seqlen_q <= 0) bad_flag("--seqlen-q", std::to_string(o.seqlen_q), "Sq >= 1, or --cu-seqlens-q");
  if (!packed_k && o.seqlen_k <= 0) bad_flag("--seqlen-k", std::to_string(o.seqlen_k), "Sk >= 1, or --cu-seqlens-k");
  if (packed_k && !packed_q) bad_flag("--cu-seqlens-k", "without --cu-seqlens-q", "packed keys with packed queries");
  if (packed_q && o.cu_seqlens_q.size() < 2) {
    bad_flag("--cu-seqlens-q", std::to_string(o.cu_seqlens_q.size()) + " offset(s)", "B + 1 >= 2 offsets");
  }
  // Packed: Q (and K, V with --cu-seqlens-k) as [T, H, D]; keys per
  // sequence otherwise, B from the offsets.
  const std::int64_t batch = packed_q ? static_cast<std::int64_t>(o.cu_seqlens_q.size()) - 1 : o.batch;
  const std::vector<int64_t> q = packed_q ? std::vector<int64_t>{o.cu_seqlens_q.back(), o.heads_q, o.dk}
                                          : std::vector<int64_t>{batch, o.seqlen_q, o.heads_q, o.dk};
  const auto kv = [&](long long d) {
    return packed_k ? std::vector<int64_t>{o.cu_seqlens_k.back(), o.heads_kv, d}
                    : std::vector<int64_t>{batch, o.seqlen_k, o.heads_kv, d};
  };
  const std::vector<int64_t> k = kv(o.dk);
  const std::vector<int64_t> v = kv(o.dv);
  std::optional<DType> kv_dtype;
  if (!o.kv_dtype.empty()) {
    kv_dtype = parse_dtype(o.kv_dtype);
    if (!kv_dtype || !is_fp8(*kv_dtype)) bad_flag("--kv-dtype", o.kv_dtype, "e4m3 or e5m2 (an fp8 KV cache)");
  }
  const AttentionProblem problem = make_problem(q, k, v,
                                                {.dtype = parse_dtype_flag(o.dtype),
                                                 .kv_dtype = kv_dtype,
                                                 .mask = parse_mask(o.causal, o.window),
                                                 .cu_seqlens_q = {o.cu_seqlens_q.begin(), o.cu_seqlens_q.end()},
                                                 .cu_seqlens_k = {o.cu_seqlens_k.begin(), o.cu_seqlens_k.end()},
                                                 .modifiers = parse_modifiers(o.modifiers, o.softcap)});
  const std::optional<tuning_db::TuningDb> db = open_db_for_dispatch(o.db_path);
  const std::optional<DbTunedSource> tuned = db ? std::optional<DbTunedSource>(std::in_place, *db) : std::nullopt;
  const Runtime runtime({.backend = *backend, .device = o.device, .tuned = tuned ? &*tuned : nullptr});
  std::printf("device:      %s (%s)\n", runtime.device_name().c_str(), runtime.device_key().c_str());
  std::printf("problem key: %s\n", problem_key(*op, problem).to_string().c_str());
  if (*op == Op::kDecode) {
    const DecodeChoice choice = runtime.explain_decode(problem, {.splits = o.splits});
    std::printf("variant:     %s\n", choice.variant.id().c_str());
    std::printf("splits:      %d\n", choice.splits);
    std::printf("database:    %s\n", db ? db->path().c_str() : "none");
    std::printf("rule:        %s\n", choice.reason.c_str());
    return;
  }
  const DispatchChoice choice = *op == Op::kBackward
                                    ? runtime.explain_backward(problem, {.deterministic = o.deterministic})
                                    : runtime.explain(problem);
  std::printf("variant:     %s\n", choice.variant.id().c_str());
  std::printf("database:    %s\n", db ? db->path().c_str() : "none");
  std::printf("rule:        %s (%s)\n", std::string(to_string(choice.rule)).c_str(), choice.detail.c_str());
}

}  // namespace attune::cli
