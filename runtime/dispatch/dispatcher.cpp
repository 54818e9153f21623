#include "runtime/dispatch/dispatcher.h"

#include <limits>

#include "core/enum_names.h"
#include "core/error.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/dispatch/tuned_id.h"

namespace attune {

constexpr NamedValue<DispatchRule> kDispatchRuleNames[] = {{DispatchRule::kTuned, "tuned"},
                                                           {DispatchRule::kNearestTuned, "nearest-tuned"},
                                                           {DispatchRule::kHeuristic, "heuristic"}};

std::string_view to_string(DispatchRule rule) { return name_of(kDispatchRuleNames, rule); }

Dispatcher::Dispatcher(std::string device_key, ArchLimits arch, const TunedSource* tuned, int sm_count)
    : device_key_(std::move(device_key)), arch_(std::move(arch)), tuned_(tuned), sm_count_(sm_count) {}

Dispatcher::~Dispatcher() = default;

DispatchChoice Dispatcher::heuristic(Op op, const AttentionProblem& problem, const Sm90Fit& fit) const {
  if (op == Op::kDecode) {
    DispatchChoice choice{heuristic_decode_variant(problem, arch_), DispatchRule::kHeuristic, "", 0};
    choice.splits = heuristic_splits(problem, choice.variant, sm_count_);
    choice.detail = std::to_string(choice.splits) + " splits fill " + std::to_string(sm_count_) + " SMs in whole waves";
    return choice;
  }
  const auto dk = static_cast<int>(problem.head_dim_k);
  const auto dv = static_cast<int>(problem.head_dim_v);
  const std::uint8_t modifiers = modifier_bits(problem.modifiers);
  // The forward and the backward: their Hopper family where the device and
  // the call allow it.
  const bool forward = op == Op::kForward;
  const char* portable = forward ? "flash_fwd" : "flash_bwd";
  const char* hopper_name = forward ? "flash_fwd_sm90" : "flash_bwd_sm90";
  ForwardHints hints{.masked = problem.mask.kind != MaskKind::kNone, .varlen = problem.is_packed()};
  std::string detail;
  if (const KernelSpec* hopper = find_kernel_spec(hopper_name); hopper != nullptr) {
    if (!kernel_runs_on(*hopper, arch_)) {
      detail = std::string(portable) + ": " + hopper_name + " needs sm_90a, the device is " + arch_.name;
    } else if (!fit.fits()) {
      detail = std::string(portable) + ": " + hopper_name + " cannot map this call (" + fit.reason(problem) + ")";
      hints.portable_only = true;
    }
  }
  DispatchChoice choice{heuristic_variant(to_string(op), problem.compute_dtype(), dk, dv, arch_, modifiers, hints),
                        DispatchRule::kHeuristic, detail, 0};
  const KernelId id = choice.variant.kernel->id;
  if (id == KernelId::kFlashFwdSm90 || id == KernelId::kFlashBwdSm90) {
    choice.detail = std::string(hopper_name) + ": TMA, wgmma and warp specialization on " + arch_.name;
    if (hints.varlen && forward) choice.detail += "; packed sequences: the varlen tile scheduler, longest first";
  }
  return choice;
}

DispatchChoice Dispatcher::resolve(Op op, const AttentionProblem& problem) const {
  // The forward and the backward have a Hopper family to fall back from.
  return resolve(op, problem, problem_key(op, problem), sm90_fit_for(op, problem));
}

DispatchChoice Dispatcher::resolve(Op op, const AttentionProblem& problem, const ProblemKey& key,
                                   const Sm90Fit& fit) const {
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
        const TunedChoice tuned = parse_tuned_id(entry.variant_id);
        if (op_of(*tuned.variant.kernel) != to_string(op)) {
          throw InvalidArgument("variant " + tuned.variant.id() + ": not a variant of a " + std::string(to_string(op)) +
                                " kernel");
        }
        const KernelId id = tuned.variant.kernel->id;
        if ((id == KernelId::kFlashFwdSm90 || id == KernelId::kFlashBwdSm90) && !fit.fits()) {
          throw InvalidArgument("variant " + tuned.variant.id() + ": cannot map this call (" + fit.reason(problem) +
                                ")");
        }
        if (op == Op::kDecode && tuned.splits == 0) {
          throw InvalidArgument("variant " + tuned.variant.id() + ": no split count; expected VARIANT/splitsN");
        }
        check_variant_fits(tuned.variant, dk, dv, arch_);
        // The key's modifiers, and the fp8 load its storage compiles in.
        const bool fp8 = is_fp8(key.dtype) || (key.kv_dtype && is_fp8(*key.kv_dtype));
        check_variant_modifiers(tuned.variant, static_cast<std::uint8_t>(key.modifiers | (fp8 ? kFeatureFp8 : 0)));
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
      const TunedChoice tuned = parse_tuned_id(best->variant_id);
      DispatchChoice choice{tuned.variant, best_distance == 0 ? DispatchRule::kTuned : DispatchRule::kNearestTuned,
                            "tuned key " + best->key.to_string(), tuned.splits};
      if (best_distance > 0) choice.detail += " at distance " + std::to_string(best_distance);
      return choice;
    }
  }
  DispatchChoice choice = heuristic(op, problem, fit);
  const std::string why =
      tuned_ == nullptr ? "no tuning database" : "no tuned key of this device for this problem class";
  choice.detail = choice.detail.empty() ? why : why + "; " + choice.detail;
  if (!passed_over.empty()) choice.detail += " (" + passed_over + ")";
  return choice;
}

const DispatchChoice& Dispatcher::choose(Op op, const AttentionProblem& problem) {
  const Sm90Fit fit = sm90_fit_for(op, problem);
  const ProblemKey key = problem_key(op, problem);
  const std::size_t start = key.hash() & (kSlots - 1);
  // Hot path: acquire loads over an open-addressed table of immutable entries.
  for (std::size_t i = 0; i < kSlots; ++i) {
    const Entry* entry = slots_[(start + i) & (kSlots - 1)].load(std::memory_order_acquire);
    if (entry == nullptr) break;
    if (entry->key == key && entry->sm90_fits == fit.fits()) return entry->choice;
  }
  auto fresh = std::make_unique<Entry>(Entry{key, fit.fits(), resolve(op, problem, key, fit)});
  const std::lock_guard<std::mutex> lock(insert_mutex_);
  for (std::size_t i = 0; i < kSlots; ++i) {
    std::atomic<const Entry*>& slot = slots_[(start + i) & (kSlots - 1)];
    const Entry* entry = slot.load(std::memory_order_acquire);
    if (entry != nullptr && entry->key == key && entry->sm90_fits == fit.fits()) {
      return entry->choice;  // another thread won
    }
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
