#include "runtime/dispatch/db_tuned_source.h"

#include "generator/kernel_registry.h"

namespace attune {

std::vector<TunedSource::Entry> DbTunedSource::best_for_device(const std::string& device_key) const {
  std::vector<Entry> out;
  for (const tuning_db::BestRow& row : db_.best_for_device(device_key)) {
    // A row measured with another version of the template is stale.
    const KernelSpec* kernel = find_kernel_spec(row.kernel);
    if (kernel == nullptr || kernel->source_hash != row.template_hash) continue;
    out.push_back({row.key, row.variant_id});
  }
  return out;
}

}  // namespace attune
