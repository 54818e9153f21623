// The built-in choices where nothing is tuned, in one place, written with the
// kernels' named tunables: the default variant of each operation for a
// problem class on an architecture, and the split count of decode.
#pragma once

#include <optional>
#include <string_view>

#include "core/problem.h"
#include "core/problem_key.h"
#include "generator/variants.h"

namespace attune {

// What the forward heuristic weighs beyond the problem class.
struct ForwardHints {
  bool masked = false;         // causal or a window: smaller key tiles pay (FlashAttention-3's choice)
  bool portable_only = false;  // flash_fwd even where flash_fwd_sm90 runs (a call TMA cannot map)
  bool varlen = false;         // packed sequences: the varlen scheduler numbers only the tiles that exist
};

// The default variant of "fwd" or "bwd" (dQ by atomics) for the problem
// class on the architecture: the listed variant nearest the shapes below.
// The forward prefers flash_fwd_sm90 wherever it is listed (sm_90a, no
// score modifier or paged cache, head dims up to 256), the backward
// flash_bwd_sm90 (heuristic_backward_variant; `hints.portable_only` holds
// for both).
Variant heuristic_variant(std::string_view op, DType dtype, int dk, int dv, const ArchLimits& arch,
                          std::uint8_t modifiers = 0, ForwardHints hints = {});

// The default backward variant: flash_bwd_sm90 wherever it is listed
// (sm_90a, no score modifier, head dims up to 128) unless `portable_only`
// (a call TMA cannot map); else flash_bwd. Either sums dQ per key block in
// a fixed order instead of by atomics when `deterministic`.
Variant heuristic_backward_variant(DType dtype, int dk, int dv, const ArchLimits& arch, bool deterministic = false,
                                   std::uint8_t modifiers = 0, bool portable_only = false);

// kDqAtomic of a flash_bwd or flash_bwd_sm90 variant (0: dQ summed in a
// fixed order, the deterministic mode).
int backward_dq_atomic(const Variant& variant);
// The same tiles with kDqAtomic = `dq_atomic`; nullopt when that variant is
// not valid.
std::optional<Variant> backward_dq_twin(const Variant& variant, int dq_atomic);

// The default decode variant of a problem: one 16-row block when the
// (packed) rows of a KV head fit in it, 64 rows otherwise; query heads packed
// per KV head when there is GQA.
Variant heuristic_decode_variant(const AttentionProblem& problem, const ArchLimits& arch);

// Which kernel serves a forward over a paged KV cache: the forward kernel
// once a sequence may bring kPagedForwardRows query rows or more (chunked
// prefill: its rows alone give the GPU work, and the forward's bigger
// tiles pay), the split-KV decode kernel below that (decode steps and short
// chunks, whose parallelism comes from splitting the keys). Op::kForward
// for a cache that is not paged, and with dropout (training), which the
// decode kernels do not have.
inline constexpr std::int64_t kPagedForwardRows = 128;
Op paged_forward_op(const AttentionProblem& problem);

// The default split count: enough CTAs to fill `sm_count` SMs in whole
// waves, never more splits than key tiles of the longest cache.
int heuristic_splits(const AttentionProblem& problem, const Variant& variant, int sm_count);

}  // namespace attune
