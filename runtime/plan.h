// A plan: everything a call of one operation needs, decided and loaded once
// per batch shape (Runtime::plan), so that each run only launches.
//
//   attune::AttentionProblem shape = ...;                  // Tq rows, B sequences, a paged cache
//   shape.device_lengths = attune::LengthBounds{.cu_seqlens_q = true, .seqlens_k = true,
//                                                .max_seqlen_q = 512, .max_seqlen_k = 32768, .max_pages = 2048};
//   const attune::Plan plan = runtime.plan(shape, attune::Op::kForward);
//   void* workspace = allocate(plan.workspace_bytes());   // the caller's memory, reused by every run
//   runtime.run(plan, buffers, {.cu_seqlens_q = cu_q, .seqlens_k = lens, .block_table = table},
//               {workspace, plan.workspace_bytes()}, stream);   // capturable in a CUDA graph
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/problem.h"
#include "core/problem_key.h"
#include "generator/variants.h"

namespace attune {

struct PlanOptions {
  // Decode: CTAs along the keys; 0: the tuned or built-in choice.
  int splits = 0;
  // Decode: keys per split, fixed (rounded up to whole key tiles of the
  // variant), so where a sequence's keys are cut depends on its own length
  // alone: with the same variant, its results do not change with the rest
  // of the batch (batch invariance). 0: off. Excludes `splits`.
  std::int64_t split_size = 0;
  // Backward: dQ summed per key block in a fixed order (BackwardOptions).
  bool deterministic = false;
};

// Caller-owned scratch memory for a run (device memory on cuda), at least
// Plan::workspace_bytes() bytes, 16-byte aligned. A run reads nothing left
// in it by an earlier one; runs in flight at once need their own.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// Copyable and immutable; valid for the runtime that made it, which must
// outlive it. Thread-safe to run from several threads at once (each with
// its own workspace).
class Plan {
 public:
  Plan() = default;  // empty: running it is an InvalidArgument

  bool empty() const { return state_ == nullptr; }
  Op op() const;                            // a forward over a paged cache with few query rows plans a decode
  const AttentionProblem& problem() const;  // with device lengths when it has length arrays
  const Variant& variant() const;           // the main kernel's
  int splits() const;                       // decode: CTAs along the keys (1 otherwise)
  std::size_t workspace_bytes() const;      // 0: a run needs no workspace
  const std::string& reason() const;        // the dispatch rule that chose the variant
  // One line: op, variant, splits, workspace, reason.
  std::string describe() const;

  struct State;
  explicit Plan(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  const State& state() const;  // InvalidArgument when empty

 private:
  std::shared_ptr<const State> state_;
};

}  // namespace attune
