#include "runtime/dispatch/db_tuned_source.h"

#include "generator/kernel_registry.h"

namespace attune {

std::optional<ProblemKey> to_problem_key(const tuning_db::ProblemKeyRecord& r) {
  const std::optional<Op> op = parse_op(r.op);
  if (!op) return std::nullopt;
  const std::optional<DType> dtype = parse_dtype(r.dtype);
  if (!dtype) return std::nullopt;
  ProblemKey key;
  key.op = *op;
  key.dtype = *dtype;
  key.head_dim_k = r.head_dim_k;
  key.head_dim_v = r.head_dim_v;
  bool known_mask = false;
  for (MaskKind kind :
       {MaskKind::kNone, MaskKind::kCausalBottomRight, MaskKind::kCausalTopLeft, MaskKind::kSlidingWindow}) {
    if (to_string(kind) == r.mask) {
      key.mask = kind;
      known_mask = true;
    }
  }
  if (!known_mask) return std::nullopt;
  key.seqlen_q_log2 = static_cast<std::int8_t>(r.seqlen_q_log2);
  key.seqlen_k_log2 = static_cast<std::int8_t>(r.seqlen_k_log2);
  key.batch_heads_log2 = static_cast<std::int8_t>(r.batch_heads_log2);
  return key;
}

std::vector<TunedSource::Entry> DbTunedSource::best_for_device(const std::string& device_key) const {
  std::vector<Entry> out;
  for (const tuning_db::BestRow& row : db_.best_for_device(device_key)) {
    // A row measured with another version of the template is stale.
    const KernelSpec* kernel = find_kernel_spec(row.kernel);
    if (kernel == nullptr || kernel->source_hash != row.template_hash) continue;
    if (auto key = to_problem_key(row.key)) out.push_back({*key, row.variant_id});
  }
  return out;
}

}  // namespace attune
