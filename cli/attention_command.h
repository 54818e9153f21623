// `attune attention`: run one attention call on files written by NumPy.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "core/problem.h"

namespace attune::cli {

struct AttentionOptions {
  std::string backend = "reference";
  std::string q_path, k_path, v_path, out_path;
  std::string lse_path;  // empty: LSE not written
  std::string dtype = "bf16";
  // fp8 (docs/contract.md, "FP8 inputs"): K and V's own storage (an fp8
  // cache under 16-bit queries), and the descales: a number (one per
  // tensor) or a float .npy [Hkv] or [B, Hkv]. FlashAttention-3's names,
  // and vLLM's --k-scale / --v-scale for the same K and V factors.
  std::string kv_dtype;
  std::string q_descale, k_descale, v_descale;
  std::string causal;  // "", "bottom-right" or "top-left"
  std::string window;  // "", or "LEFT,RIGHT"
  std::optional<double> scale;
  std::string seqlens_k_path, cu_seqlens_q_path, cu_seqlens_k_path;
  std::string variant;
  std::string db_path;  // tuning database for dispatch (emu, cuda)
  // Split-KV decode over a KV cache.
  std::string k_cache_path, v_cache_path;  // instead of --k/--v
  std::string cache_seqlens_path;          // int32 [B] keys held per sequence
  std::string block_table_path;            // int32 [B, max_pages]: a paged cache
  std::int64_t page_size = 0;
  std::optional<int> splits;  // CTAs along the keys; unset or 0: the built-in choice
  int repeat = 0;             // > 0: plan once, warm up, run this many times, print the median host time
  // Backward: gradients of sum(dO * O) from the forward's inputs and flags.
  bool backward = false;
  std::string d_o_path, dq_path, dk_path, dv_path;
  std::string o_in_path, lse_in_path;  // the forward's O and LSE; empty: computed
  bool deterministic = false;          // dQ summed in a fixed order: bitwise-repeatable gradients
  std::string dsink_path;              // backward with sinks: dsink [Hq] (empty: not written)
  // Score modifiers (docs/contract.md), flash-attn's and vLLM's names.
  std::optional<double> softcap;  // c > 0: scores become c * tanh(s / c)
  std::string sinks_path;         // float [Hq]: one sink logit per query head
  std::string alibi_slopes_path;  // float [Hq] or [B, Hq]
  // Attention dropout: p in [0, 1) with the Philox (seed, offset) that draws
  // the mask; the backward regenerates it from the same flags. A fixed
  // default seed keeps a command line repeatable.
  std::optional<double> dropout;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint64_t> offset;
};

// Registers the subcommand and its flags on `app`, bound to `options`.
CLI::App* add_attention_command(CLI::App& app, AttentionOptions& options);

// --dropout, --seed and --offset into `modifiers` (seed and offset default
// to 0; either without --dropout is refused). Throws InvalidArgument.
void set_dropout(const AttentionOptions& options, ScoreModifiers& modifiers);

// Runs the call and writes the outputs; throws attune::Error on bad input.
void run_attention(const AttentionOptions& options);

}  // namespace attune::cli
