#include "runtime/dispatcher.h"

#include <limits>

#include "core/error.h"

namespace attune {

std::string_view to_string(DispatchRule rule) {
  switch (rule) {
    case DispatchRule::kTuned:
      return "tuned";
    case DispatchRule::kNearestTuned:
      return "nearest-tuned";
    case DispatchRule::kHeuristic:
      return "heuristic";
  }
  return "?";
}

Dispatcher::Dispatcher(std::string device_key, ArchLimits arch, const TunedSource* tuned)
    : device_key_(std::move(device_key)), arch_(std::move(arch)), tuned_(tuned) {}

Dispatcher::~Dispatcher() = default;

DispatchChoice Dispatcher::resolve(const AttentionProblem& problem) const {
  const ProblemKey key = problem_key(Op::kForward, problem);
  const int dk = static_cast<int>(problem.head_dim_k);
  const int dv = static_cast<int>(problem.head_dim_v);
  std::string passed_over;
  if (tuned_ != nullptr) {
    const std::vector<TunedSource::Entry> entries = tuned_->best_for_device(device_key_);
    const TunedSource::Entry* best = nullptr;
    int best_distance = std::numeric_limits<int>::max();
    for (const TunedSource::Entry& entry : entries) {
      const int distance = bucket_distance(entry.key, key);
      if (distance == std::numeric_limits<int>::max() || distance > best_distance) continue;
      // The database holds data only: validate the id against the template
      // and the architecture before trusting it.
      try {
        check_variant_fits(parse_variant_id(entry.variant_id), dk, dv, arch_);
      } catch (const InvalidArgument& e) {
        passed_over +=
            std::string(passed_over.empty() ? "" : "; ") + "passed over " + entry.key.to_string() + ": " + e.what();
        continue;
      }
      // Ties go to the larger problem: its variant wastes less on a smaller one.
      if (distance < best_distance || (best != nullptr && entry.key.seqlen_k_log2 > best->key.seqlen_k_log2)) {
        best = &entry;
        best_distance = distance;
      }
    }
    if (best != nullptr) {
      DispatchChoice choice{parse_variant_id(best->variant_id),
                            best_distance == 0 ? DispatchRule::kTuned : DispatchRule::kNearestTuned,
                            "tuned key " + best->key.to_string()};
      if (best_distance > 0) choice.detail += " at distance " + std::to_string(best_distance);
      return choice;
    }
  }
  DispatchChoice choice{
      heuristic_variant("fwd", problem.dtype, dk, dv, arch_), DispatchRule::kHeuristic,
      tuned_ == nullptr ? "no tuning database" : "no tuned key of this device for this problem class"};
  if (!passed_over.empty()) choice.detail += " (" + passed_over + ")";
  return choice;
}

const DispatchChoice& Dispatcher::choose(const AttentionProblem& problem) {
  const ProblemKey key = problem_key(Op::kForward, problem);
  const std::size_t start = key.hash() & (kSlots - 1);
  // Hot path: acquire loads over an open-addressed table of immutable entries.
  for (std::size_t i = 0; i < kSlots; ++i) {
    const Entry* entry = slots_[(start + i) & (kSlots - 1)].load(std::memory_order_acquire);
    if (entry == nullptr) break;
    if (entry->key == key) return entry->choice;
  }
  auto fresh = std::make_unique<Entry>(Entry{key, resolve(problem)});
  const std::lock_guard<std::mutex> lock(insert_mutex_);
  for (std::size_t i = 0; i < kSlots; ++i) {
    std::atomic<const Entry*>& slot = slots_[(start + i) & (kSlots - 1)];
    const Entry* entry = slot.load(std::memory_order_acquire);
    if (entry != nullptr && entry->key == key) return entry->choice;  // another thread won
    if (entry == nullptr) {
      if (owned_.size() >= kMaxEntries) break;  // full: answer without remembering
      slot.store(fresh.get(), std::memory_order_release);
      owned_.push_back(std::move(fresh));
      return owned_.back()->choice;
    }
  }
  owned_.push_back(std::move(fresh));  // kept alive for the caller's reference
  return owned_.back()->choice;
}

}  // namespace attune
