// What the tuner's tests share: a tuning run on the emulator into a database
// file of the test's own, and one sweep of it with its counts checked.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/runtime.h"
#include "tests/support/temp_dir.h"
#include "tuner/tuner.h"
#include "tuning_db/tuning_db.h"

namespace attune::testing {

// What a sweep must report.
struct SweepCounts {
  std::size_t measured = 0;
  std::size_t failed = 0;
};

// The emulator's runtime and a tuning database of the test's own, open (in
// a fresh directory named after `prefix`, removed with it).
struct EmuTuning {
  explicit EmuTuning(const std::string& prefix) : dir(prefix) {}

  // Measures each of `tasks` once into the database and checks the counts.
  tuner::TuneSummary sweep_once(const std::vector<tuner::Task>& tasks, SweepCounts want,
                                std::function<void(const tuner::Progress&)> on_progress = {}) {
    const tuner::TuneSummary summary =
        tuner::run_sweep(tasks, runtime, db, {.repetitions = 1, .on_progress = std::move(on_progress)});
    EXPECT_EQ(summary.measured, want.measured);
    EXPECT_EQ(summary.failed, want.failed);
    return summary;
  }

  TempDir dir;  // first, so it goes after the database closes
  Runtime runtime{RuntimeOptions{.backend = Backend::kEmu}};
  tuning_db::TuningDb db = tuning_db::TuningDb::open(dir.path() / "tuning.db");
};

}  // namespace attune::testing
