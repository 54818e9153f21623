// What tuning gained: for each (device, problem key) of the database, its
// measurements, the heuristic default the runtime would run without tuning,
// and how many times faster the best variant is than that default. The
// report (report.h) renders it; nothing here knows HTML.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tuning_db/tuning_db.h"

namespace attune::tuner {

// One (device, problem key) with its measurements and the gain of tuning.
struct KeyAnalysis {
  tuning_db::BestRow best;
  std::vector<tuning_db::MeasurementRow> rows;  // fastest ok first, then failed
  std::optional<std::string> default_id;
  std::optional<double> gain;
  std::optional<double> tflops;  // of the best measurement
};
KeyAnalysis analyze_key(const tuning_db::TuningDb& db, const tuning_db::BestRow& row);

// How many times faster the best variant of `row` is than the heuristic
// default (default median / best median), or nothing when the default was
// not measured ok on that key.
std::optional<double> gain_over_default(const tuning_db::TuningDb& db, const tuning_db::BestRow& row);

}  // namespace attune::tuner
