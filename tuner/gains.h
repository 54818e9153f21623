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
  // The speed model's bound of the best variant on the device (forward and
  // backward keys of a GPU; not for the emulator, whose timings are CPU
  // time), to set against the measured TFLOP/s.
  std::optional<double> predicted_tflops;
};

// The model's bound of a variant on the GPU of a device key
// ("NVIDIA H200/cc9.0/sm132"), or nothing when the key is the emulator's or
// its architecture has no rates.
std::optional<double> predicted_tflops(const std::string& device_key, const std::string& variant_id, DType dtype);
KeyAnalysis analyze_key(const tuning_db::TuningDb& db, const tuning_db::BestRow& row);

// How many times faster the best variant of `row` is than the heuristic
// default (default median / best median), or nothing when the default was
// not measured ok on that key.
std::optional<double> gain_over_default(const tuning_db::TuningDb& db, const tuning_db::BestRow& row);

}  // namespace attune::tuner
