// Which variant runs a problem: in-process memo, then the tuned best for
// (device, problem key), then the nearest tuned key of the device, then the
// architecture's heuristic default. Every answer says which rule chose it.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/problem_key.h"
#include "generator/variants.h"

namespace attune {

enum class DispatchRule : std::uint8_t { kTuned, kNearestTuned, kHeuristic };
std::string_view to_string(DispatchRule rule);  // "tuned", "nearest-tuned", "heuristic"

struct DispatchChoice {
  Variant variant;
  DispatchRule rule = DispatchRule::kHeuristic;
  std::string detail;  // the key it came from, the distance, or why tuned entries were passed over
  int splits = 0;      // decode: CTAs along the keys; 0 for other ops
};

// Tuned results, as the tuning database (or a test) provides them.
class TunedSource {
 public:
  struct Entry {
    ProblemKey key;
    std::string variant_id;  // decode: with its split count (runtime/tuned_id.h)
  };
  virtual ~TunedSource() = default;
  // The best variant of every tuned problem key of the device.
  virtual std::vector<Entry> best_for_device(const std::string& device_key) const = 0;
};

class Dispatcher {
 public:
  // `device_key` as DeviceInfo::key() (or the emulator's own key); `tuned`
  // may be null (no database); it must outlive the dispatcher. `sm_count`:
  // what the decode heuristic fills with splits.
  Dispatcher(std::string device_key, ArchLimits arch, const TunedSource* tuned, int sm_count = 132);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // The variant for a validated problem. Once a key has been seen, this
  // allocates nothing and takes no lock (a lock-free memo table).
  const DispatchChoice& choose(const AttentionProblem& problem) { return choose(Op::kForward, problem); }
  const DispatchChoice& choose(Op op, const AttentionProblem& problem);
  // The same without the memo, for `attune explain`.
  DispatchChoice resolve(const AttentionProblem& problem) const { return resolve(Op::kForward, problem); }
  DispatchChoice resolve(Op op, const AttentionProblem& problem) const;

  const std::string& device_key() const { return device_key_; }

 private:
  // A forward's choice also depends on whether flash_fwd_sm90 can map the
  // call (strides, paging), which the problem key does not hold.
  struct Entry {
    ProblemKey key;
    bool sm90_fits;
    DispatchChoice choice;
  };
  static constexpr std::size_t kSlots = 4096;  // power of two
  static constexpr std::size_t kMaxEntries = kSlots * 3 / 4;

  DispatchChoice heuristic(Op op, const AttentionProblem& problem, const Sm90Fit& fit) const;
  // resolve() for a problem whose key and fit the caller has made already.
  DispatchChoice resolve(Op op, const AttentionProblem& problem, const ProblemKey& key, const Sm90Fit& fit) const;

  std::string device_key_;
  ArchLimits arch_;
  const TunedSource* tuned_;
  int sm_count_;
  std::array<std::atomic<const Entry*>, kSlots> slots_{};
  std::mutex insert_mutex_;
  std::vector<std::unique_ptr<Entry>> owned_;  // guarded by insert_mutex_
};

}  // namespace attune
