// What a tuning sweep covers: problems (dtypes x head dims x masks x score
// modifiers x sequence lengths x batch-heads) and, for each, the variants to
// time.
//
// Sweep file (attune tune --sweep FILE): one `name = values` line per axis,
// values separated by commas, `#` starts a comment; axes left out keep their
// defaults:
//   dtypes      = bf16, fp16         # or e4m3, e5m2: fp8 Q, K and V (fwd; O in bf16)
//   kv_dtype    = e4m3               # an fp8 KV cache under the dtypes' queries (fwd, decode)
//   head_dims   = 64, 128            # Dk = Dv
//   masks       = none, causal       # causal: bottom-right
//   modifiers   = none, softcap, sinks+alibi, dropout  # modifier sets, each under its own key (default none)
//   softcap     = 30                 # c of the problems whose set has softcap (default 30)
//   dropout     = 0.1                # p of the problems whose set has dropout (default 0.1; fwd and bwd)
//   seqlens     = 128, 1024          # Sq = Sk
//   batch_heads = 1x8, 4x16          # B x H (H query heads = kv heads; decode: H kv heads)
//   max_variants = 8                 # per problem class, spread over the list; 0: all
//   order = model                    # or list: which max_variants (the model's best first)
//   op          = decode             # fwd (default), bwd, or decode (split-KV over a KV cache)
// A modifier set is none, or softcap, sinks, alibi and dropout joined by '+'
// in any order (a set named twice counts once); ALiBi slopes are per query
// head.
// Decode only (seqlens are then the cache lengths):
//   queries     = 1, 4               # Sq, query rows per sequence
//   gqa         = 8                  # query heads per kv head
//   splits      = 1, 4, 16           # split counts to time with each variant (0: the heuristic's)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/problem.h"
#include "core/problem_key.h"
#include "generator/variants.h"

namespace attune::tuner {

struct SweepSpec {
  std::string op = "fwd";
  std::vector<DType> dtypes = {DType::kBF16};
  // K's and V's storage when it differs from the queries': an fp8 KV cache
  // (e4m3 or e5m2). Unset: the dtype's. Not with fp8 dtypes of another format.
  std::optional<DType> kv_dtype;
  std::vector<int> head_dims = {64};
  std::vector<Mask> masks = {Mask::none()};
  // Modifier sets as bits (kModSoftcap | kModSinks | kModAlibi |
  // kModDropout; 0: none). A problem with ALiBi has slopes per query head
  // ([Hq]).
  std::vector<std::uint8_t> modifiers = {0};
  double softcap = 30;   // c of the problems whose set has softcap
  double dropout = 0.1;  // p of the problems whose set has dropout (seed and offset 0)
  std::vector<std::int64_t> seqlens = {128};
  std::vector<std::pair<std::int64_t, std::int64_t>> batch_heads = {{1, 2}};
  int max_variants = 0;
  // "list": max_variants spread over the list; "model": the max_variants
  // with the highest bound of the speed model (profile/profile.h) first.
  std::string order = "list";
  std::vector<std::int64_t> queries = {1};
  std::int64_t gqa = 1;
  std::vector<int> splits = {0};
};

// Sets one axis from its text ("dtypes", "bf16,fp16"); throws InvalidArgument
// naming the axis, the value and what was expected.
void set_axis(SweepSpec& spec, const std::string& axis, const std::string& values);
SweepSpec read_sweep_file(const std::filesystem::path& path);

// K of N: this process takes every task whose index % N == K.
struct Shard {
  int index = 0;
  int count = 1;
};
Shard parse_shard(const std::string& text);  // "K/N", 0 <= K < N

struct Task {
  AttentionProblem problem;  // contiguous
  Variant variant;
  int splits = 0;  // decode: CTAs along the keys (>= 1); 0 otherwise
  Op op = Op::kForward;
};

// The operation of a task, and its id as the tuning database records it
// (the variant id; decode adds its split count, runtime/tuned_id.h).
Op task_op(const Task& task);
std::string task_variant_id(const Task& task);

// The score modifiers of a sweep problem using the set `bits`: softcap
// `softcap`, sinks, ALiBi slopes per query head, dropout `dropout` (seed
// and offset 0: the mask changes no kernel's speed).
ScoreModifiers sweep_modifiers(std::uint8_t bits, double softcap, double dropout = SweepSpec{}.dropout);

// Every (problem, variant[, split count]) of the sweep in a stable order, then
// this shard's part. Problems carry their modifier set, and their variants
// compile it in. `sm_count`: what decode's heuristic split count fills.
std::vector<Task> plan(const SweepSpec& spec, const ArchLimits& arch, Shard shard = {}, int sm_count = 132);

// FLOPs of the forward pass: 4 * B * Hq * Dk * visible pairs (design brief).
double forward_flops(const AttentionProblem& problem);
// FLOPs of a backward call: 2.5 x the forward's (the five products S, dP,
// dV, dK, dQ of the recomputing backward).
double backward_flops(const AttentionProblem& problem);

}  // namespace attune::tuner
