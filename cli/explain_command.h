// `attune explain`: which variant a problem would run, and the rule that chose it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace attune::cli {

struct ExplainOptions {
  std::string backend = "emu";
  int device = 0;
  std::string dtype = "bf16";
  std::string kv_dtype;  // e4m3 / e5m2: an fp8 KV cache under --dtype queries
  long long batch = 1, seqlen_q = 0, seqlen_k = 0, heads_q = 1, heads_kv = 1, dk = 0, dv = 0;
  std::string causal, window;
  std::string db_path;
  std::string op = "fwd";      // fwd, bwd or decode (--seqlen-k is then the cache length)
  int splits = 0;              // decode: as asked; 0: the dispatcher's
  bool deterministic = false;  // bwd: the variant deterministic mode runs
  std::string modifiers;       // score modifiers: none, or softcap, sinks, alibi joined by '+'
  std::optional<double> softcap;
  // Packed sequences (flash-attn's varlen): offsets, B + 1 of them.
  std::vector<int> cu_seqlens_q, cu_seqlens_k;
};

CLI::App* add_explain_command(CLI::App& app, ExplainOptions& options);
void run_explain(const ExplainOptions& options);

}  // namespace attune::cli
