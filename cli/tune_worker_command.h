// `attune tune-worker`: measures one candidate and prints one result line.
// Started by `attune tune --isolate`, never by hand (hidden from --help).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace attune::cli {

struct TuneWorkerOptions {
  std::string backend = "cuda";
  int device = 0;
  std::string variant, dtype = "bf16", mask = "none";
  std::string kv_dtype;  // e4m3 or e5m2: an fp8 KV cache under --dtype queries; empty: --dtype's
  long long batch = 1, seqlen = 0, heads = 1, dk = 0, dv = 0;
  long long seqlen_k = 0, heads_kv = 0;  // 0: as seqlen, heads
  int splits = 0;                        // > 0: split-KV decode
  std::string op = "fwd";
  std::string modifiers = "none";  // modifier_names of the problem's score modifiers
  double softcap = 30;             // c, with softcap among them
  double dropout = 0.1;            // p, with dropout among them
  int warmup = 1, repetitions = 5;
};

CLI::App* add_tune_worker_command(CLI::App& app, TuneWorkerOptions& options);
void run_tune_worker(const TuneWorkerOptions& options);

}  // namespace attune::cli
