// The tuning loop: for each (problem, variant) of a sweep, a correctness gate
// on a small instance, then timing, each measurement recorded in its own
// transaction (which also keeps the best per device and problem key).
// Measured pairs are skipped, so a sweep stopped at any moment (Ctrl-C,
// kill -9) resumes where it stopped, with nothing lost or measured twice.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
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

// How candidates run when isolated: each in a fresh process (`attune
// tune-worker`, started by exec so no CUDA state crosses a fork) with a time
// limit. A candidate that crashes, hangs or poisons its CUDA context fails
// alone; the next one gets a new process.
struct WorkerOptions {
  std::string executable;  // the attune binary
  double time_limit_seconds = 300;
  std::string backend = "cuda";
  int device = 0;
};

struct TuneOptions {
  int warmup = 1;
  int repetitions = 5;
  std::function<void(const Progress&)> on_progress;  // after every task
  std::optional<WorkerOptions> isolate;              // unset: measure in this process
};

// One candidate's outcome.
struct Measurement {
  bool ok = false;  // passed the correctness gate and was timed
  std::optional<double> max_error;
  std::optional<double> median_ms;
  std::optional<double> spread_ms;
  std::optional<double> tflops;
  std::string error;  // why it failed
};

// The gate on a small instance, then timing; in this process.
Measurement measure(Runtime& runtime, const Task& task, const TuneOptions& options);

// The worker protocol: the arguments after `attune tune-worker` that
// describe a task, the task they describe, and the one result line.
std::vector<std::string> worker_arguments(const Task& task, const TuneOptions& options, const WorkerOptions& worker);
std::string format_result(const Measurement& m);
std::optional<Measurement> parse_result(const std::string& line);

// Thrown by measure_in_worker when the worker was stopped from outside
// (SIGTERM, SIGINT, SIGHUP, SIGQUIT: the job was cancelled): the sweep stops
// and records nothing for the candidate, so a resumed sweep measures it.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// Thrown by run_sweep when a candidate measured in this process hit a sticky
// CUDA error: that candidate is recorded as failed with the error, but the
// context is lost, so every later candidate would fail with it too. The
// sweep stops; rerunning it (a new process) resumes after the candidate.
class ContextLost : public Error {
 public:
  using Error::Error;
};

// Runs measure() in a worker process; crashes, hangs and missing results
// become failed measurements with the reason.
Measurement measure_in_worker(const Task& task, const TuneOptions& options);

struct TuneSummary {
  std::size_t measured = 0;
  std::size_t failed = 0;   // wrong results or errors: recorded, never best
  std::size_t skipped = 0;  // measured before
};

// Compiles every (variant, dtype) of the sweep for `arch` with the compiler
// service (in parallel, into the kernel cache at `cache_directory`), so that
// the timed runs, and their worker processes, load binaries from the cache.
// Returns how many failed to compile (they fail again, as measurements).
std::size_t precompile(const std::vector<Task>& tasks, const std::string& arch,
                       const std::filesystem::path& cache_directory, unsigned threads);

TuneSummary run_sweep(const std::vector<Task>& tasks, Runtime& runtime, tuning_db::TuningDb& db,
                      const TuneOptions& options);

// The database record of a problem (key and exact sizes) for an operation.
tuning_db::ProblemRecord problem_record(Op op, const AttentionProblem& problem);

}  // namespace attune::tuner
