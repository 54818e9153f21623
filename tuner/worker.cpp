// Candidates in worker processes: the protocol (arguments, one JSON result line)
// and the supervisor that spawns a worker, enforces the time limit, and turns
// crashes and hangs into failed measurements.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tuner/tuner.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): not declared by every libc header set

namespace attune::tuner {

namespace {

using json = nlohmann::json;

// The result is one JSON object on one line, tagged with the protocol
// version; the worker may print other lines around it.
constexpr const char* kResultTag = "attune_result";
constexpr int kProtocolVersion = 1;

json optional_number(const std::optional<double>& value) {
  return value && std::isfinite(*value) ? json(*value) : json(nullptr);
}

std::optional<double> read_number(const json& value) {
  if (value.is_null()) return std::nullopt;
  return value.get<double>();
}

// A command-line word: text as it is, a number in decimal.
std::string argument_text(std::string_view text) { return std::string(text); }
std::string argument_text(std::int64_t number) { return std::to_string(number); }

template <typename... Words>
std::vector<std::string> command_line(const Words&... words) {
  return {argument_text(words)...};
}

}  // namespace

std::vector<std::string> worker_arguments(const Task& task, const TuneOptions& options, const WorkerOptions& worker) {
  const AttentionProblem& p = task.problem;
  std::vector<std::string> modifiers = {"--modifiers", modifier_names(modifier_bits(p.modifiers))};
  if (p.modifiers.softcap != 0) {
    char c[32];
    std::snprintf(c, sizeof(c), "%.17g", p.modifiers.softcap);  // every digit: the worker's c is this c
    modifiers.insert(modifiers.end(), {"--softcap", c});
  }
  if (p.modifiers.dropout()) {
    char dropout[32];
    std::snprintf(dropout, sizeof(dropout), "%.17g", p.modifiers.dropout_p);
    modifiers.insert(modifiers.end(), {"--dropout", dropout});
  }
  std::vector<std::string> args = command_line(
      "tune-worker", "--backend", worker.backend, "--device", worker.device, "--variant", task.variant.id(), "--dtype",
      to_string(p.dtype), "--batch", p.batch, "--seqlen", p.seqlen_q, "--seqlen-k", p.seqlen_k, "--heads", p.heads_q,
      "--heads-kv", p.heads_kv, "--splits", task.splits, "--op", to_string(task.op), "--dk", p.head_dim_k, "--dv",
      p.head_dim_v, "--mask", to_string(p.mask.kind), "--warmup", options.warmup, "--repetitions", options.repetitions);
  args.insert(args.end(), modifiers.begin(), modifiers.end());
  // An fp8 KV cache under the queries' dtype: the worker's problem keys the same.
  if (p.kv_dtype && *p.kv_dtype != p.dtype)
    args.insert(args.end(), {"--kv-dtype", std::string(to_string(*p.kv_dtype))});
  return args;
}

std::string format_result(const Measurement& m) {
  return json{{kResultTag, kProtocolVersion},
              {"ok", m.ok},
              {"max_error", optional_number(m.max_error)},
              {"median_ms", optional_number(m.median_ms)},
              {"spread_ms", optional_number(m.spread_ms)},
              {"tflops", optional_number(m.tflops)},
              {"error", m.error}}
      .dump();  // one line: dump() escapes newlines
}

std::optional<Measurement> parse_result(const std::string& line) {
  if (line.empty() || line.front() != '{') return std::nullopt;
  const json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
  // A tag of another type is a line from something else, not an exception.
  if (!object.is_object() || !object.contains(kResultTag) || object.at(kResultTag) != kProtocolVersion) {
    return std::nullopt;
  }
  Measurement m;
  try {
    m.ok = object.at("ok").get<bool>();
    m.max_error = read_number(object.at("max_error"));
    m.median_ms = read_number(object.at("median_ms"));
    m.spread_ms = read_number(object.at("spread_ms"));
    m.tflops = read_number(object.at("tflops"));
    m.error = object.at("error").get<std::string>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
  if (m.ok && !m.median_ms) return std::nullopt;
  return m;
}

namespace {

// Signals a job is stopped with, never what a faulty kernel dies of (SEGV,
// ABRT, BUS, ILL, FPE) nor what the time limit sends (KILL).
bool stopped_from_outside(int signal) {
  return signal == SIGTERM || signal == SIGINT || signal == SIGHUP || signal == SIGQUIT;
}

}  // namespace

Measurement measure_in_worker(const Task& task, const TuneOptions& options) {
  if (!options.isolate) throw Error("measure_in_worker: no worker options");
  const WorkerOptions& worker = *options.isolate;
  std::vector<std::string> args = worker_arguments(task, options, worker);
  args.insert(args.begin(), worker.executable);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error(std::string("tune: cannot create a pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  // Its own process group, so a timeout stops whatever the worker started too.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, worker.executable.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(out[1]);
  Measurement failed;
  if (spawned != 0) {
    close(out[0]);
    failed.error = "cannot start the worker " + worker.executable + ": " + std::strerror(spawned);
    return failed;
  }

  // Read the result line until the time limit; then stop the worker.
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(worker.time_limit_seconds);
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fd{out[0], POLLIN, 0};
    const int ready = poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // the worker closed its output
    output.append(buffer, static_cast<std::size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    failed.error = "no result within the time limit of " + std::to_string(worker.time_limit_seconds) + " s";
    return failed;
  }
  kill(-pid, SIGKILL);  // nothing the worker started outlives it
  if (WIFSIGNALED(status) && stopped_from_outside(WTERMSIG(status))) {
    // A scheduler cancelling the job (scancel, a preemption) signals every
    // process of it, the worker too. That is not the candidate's failure:
    // recording it would make the resumed sweep skip the candidate.
    throw Interrupted("tune: the worker measuring " + task_variant_id(task) + " was stopped by " +
                      strsignal(WTERMSIG(status)) + " from outside; nothing was recorded for it (rerun to resume)");
  }
  if (WIFSIGNALED(status)) {
    failed.error = std::string("worker crashed: ") + strsignal(WTERMSIG(status));
    return failed;
  }
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (auto result = parse_result(line)) return *result;
  }
  failed.error = "worker exited with status " + std::to_string(WEXITSTATUS(status)) + " and no result";
  return failed;
}

}  // namespace attune::tuner
