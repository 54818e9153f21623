// The tuning database as the dispatcher's source of tuned results.
#pragma once

#include "runtime/dispatch/dispatcher.h"
#include "tuning_db/tuning_db.h"

namespace attune {

class DbTunedSource : public TunedSource {
 public:
  // `db` must outlive this object.
  explicit DbTunedSource(const tuning_db::TuningDb& db) : db_(db) {}
  // Rows of another template version (stale) or whose op, dtype or mask the
  // runtime does not know are left out.
  std::vector<Entry> best_for_device(const std::string& device_key) const override;

 private:
  const tuning_db::TuningDb& db_;
};

}  // namespace attune
