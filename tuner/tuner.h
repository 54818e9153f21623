// The tuning loop: for each (problem, variant) of a sweep, a correctness gate
// on a small instance, then timing, each measurement recorded in its own
// transaction (which also keeps the best per device and problem key).
// Measured pairs are skipped, so a sweep stopped at any moment (Ctrl-C,
// kill -9) resumes where it stopped, with nothing lost or measured twice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "tuner/sweep.h"
#include "tuning_db/tuning_db.h"

namespace attune::tuner {

struct Progress {
  std::size_t done = 0;  // measured, skipped or failed
  std::size_t total = 0;
  std::size_t failed = 0;
  std::size_t skipped = 0;  // already in the database
  double elapsed_seconds = 0;
  std::string current;  // the task being measured
};

struct TuneOptions {
  int warmup = 1;
  int repetitions = 5;
  std::function<void(const Progress&)> on_progress;  // after every task
};

struct TuneSummary {
  std::size_t measured = 0;
  std::size_t failed = 0;   // wrong results or errors: recorded, never best
  std::size_t skipped = 0;  // measured before
};

TuneSummary run_sweep(const std::vector<Task>& tasks, Runtime& runtime, tuning_db::TuningDb& db,
                      const TuneOptions& options);

// The database record of a problem (key and exact sizes).
tuning_db::ProblemRecord problem_record(const AttentionProblem& problem);

}  // namespace attune::tuner
