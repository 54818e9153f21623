#include "tuner/tuner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <random>

#include "core/error.h"
#include "core/problem_key.h"
#include "core/version.h"
#include "reference/accuracy.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"
#include "runtime/jit/compiler_service.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/launch/flash_bwd_params.h"
#include "tuner/timing.h"

namespace attune::tuner {

namespace {

Inputs make_inputs(const AttentionProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  Inputs in;
  draw_qkv(p, rng, in);
  in.modifiers = modifier_inputs(p, rng);
  return in;
}

// Launches the task's kernel (forward, or decode with its split count) on `p`.
void launch(Runtime& runtime, const Task& task, const AttentionProblem& p, const AttentionBuffers& buffers) {
  if (task.splits > 0) {
    runtime.decode_variant(task.variant, task.splits, p, buffers);
  } else {
    runtime.forward_variant(task.variant, p, buffers);
  }
}

// Runs the task once on `inputs` and returns O and LSE as the reference lays them out.
ReferenceOutput run_once(Runtime& runtime, const Task& task, const AttentionProblem& p, const Inputs& in) {
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)), 0xFFFF);
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  if (runtime.backend() == Backend::kEmu) {
    const ModifierTensors mods = in.modifiers.host();
    launch(runtime, task, p,
           {in.stored_q().host, in.stored_k().host, in.stored_v().host, o.data(), lse.data(), mods.sinks,
            mods.alibi_slopes});
  } else {
    cuda::Driver& driver = cuda::Driver::get();
    const DeviceModifiers mods(driver, in.modifiers);
    const auto input = [](const cuda::DeviceBuffers::Spec& s) { return cuda::HostArray{s.host, nullptr, s.bytes}; };
    cuda::run_on_device(
        driver, nullptr,
        {input(in.stored_q()), input(in.stored_k()), input(in.stored_v()), cuda::inout(o), cuda::out(lse)},
        [&](const std::vector<void*>& d) {
          launch(runtime, task, p,
                 {d[0], d[1], d[2], d[3], static_cast<float*>(d[4]), mods.sinks(), mods.alibi_slopes()});
        });
  }
  ReferenceOutput out;
  out.o = widen_bits<double>(p.compute_dtype(), o);  // fp8 Q: O is bf16
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

// The small instance the gate checks: the same problem class (its score
// modifiers too, c as gate_modifiers caps it) with odd sizes and two (KV)
// heads at most. Decode keeps its query rows and group size and a cache long
// enough that several splits have keys and the last ones may not.
AttentionProblem gate_problem(const Task& task) {
  const AttentionProblem& full = task.problem;
  const ProblemOptions options{.dtype = full.dtype,
                               .kv_dtype = full.kv_dtype,
                               .mask = full.mask,
                               .scale = full.scale,
                               .modifiers = gate_modifiers(full.modifiers)};
  if (task.splits > 0) {
    const std::int64_t kv = std::min<std::int64_t>(full.heads_kv, 2);
    const std::int64_t sq = std::min<std::int64_t>(full.seqlen_q, 77);
    const std::int64_t sk = std::min<std::int64_t>(full.seqlen_k, 333) + 2;
    return make_problem(std::vector<std::int64_t>{1, sq, kv * full.group_size(), full.head_dim_k},
                        std::vector<std::int64_t>{1, sk, kv, full.head_dim_k},
                        std::vector<std::int64_t>{1, sk, kv, full.head_dim_v}, options);
  }
  const std::int64_t s = std::min<std::int64_t>(full.seqlen_q, 77);
  const std::int64_t h = std::min<std::int64_t>(full.heads_q, 2);
  return make_problem(std::vector<std::int64_t>{1, s, h, full.head_dim_k},
                      std::vector<std::int64_t>{1, s + 13, h, full.head_dim_k},
                      std::vector<std::int64_t>{1, s + 13, h, full.head_dim_v}, options);
}

// The gate: the task on a small instance of its problem class against the
// fp64 reference with FlashAttention's rule. Both references read the 16-bit
// slots and dequantize fp8 inputs (descales 1: the tuner passes none).
bool passes_gate(Runtime& runtime, const Task& task, double* max_error, std::string* why) {
  const AttentionProblem p = gate_problem(task);
  const Inputs in = make_inputs(p, 7);
  const ReferenceOutput got = run_once(runtime, task, p, in);
  const ReferenceOutput want = reference_forward(p, in.q.data(), in.k.data(), in.v.data(), in.modifiers.host());
  *max_error = accuracy_errors(got, want).o;
  return within_accuracy_rule(
      got, want, naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data(), in.modifiers.host()), 2.0, why);
}

Timing time_task(Runtime& runtime, const Task& task, const TuneOptions& o) {
  const AttentionProblem& p = task.problem;
  // Two input sets, alternated, so repeated runs do not time a warm cache.
  const Inputs sets[2] = {make_inputs(p, 1), make_inputs(p, 2)};
  std::vector<std::uint16_t> out(static_cast<std::size_t>(o_extent(p)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(p)));
  // A problem without length arrays is timed through a plan made once, with
  // its workspace allocated once, as a serving loop runs it: a convenience
  // call would allocate and synchronize around the kernels for a workspace
  // (split decode, the Hopper forward's dynamic tile counter), which is not
  // the variant's time.
  const bool planned = !p.is_packed() && !p.has_seqlens_k() && !p.is_paged();
  const Plan plan = planned ? runtime.plan_variant(task.variant, p, {.splits = task.splits}) : Plan{};
  const std::size_t workspace_bytes = planned ? plan.workspace_bytes() : 0;
  const auto run = [&](const AttentionBuffers& buffers, void* workspace) {
    if (planned) {
      runtime.run(plan, buffers, {}, {workspace, workspace_bytes});
    } else {
      launch(runtime, task, p, buffers);
    }
  };
  if (runtime.backend() == Backend::kEmu) {
    std::vector<std::array<std::byte, 16>> workspace((workspace_bytes + 15) / 16);
    return time_runs(runtime, o, [&](int set) {
      const Inputs& in = sets[set];
      const ModifierTensors mods = in.modifiers.host();
      run({in.stored_q().host, in.stored_k().host, in.stored_v().host, out.data(), lse.data(), mods.sinks,
           mods.alibi_slopes},
          workspace.empty() ? nullptr : workspace.data());
    });
  }
  cuda::Driver& driver = cuda::Driver::get();
  std::vector<std::unique_ptr<cuda::DeviceBuffers>> device;
  std::vector<std::unique_ptr<DeviceModifiers>> mods;
  for (const Inputs& in : sets) {
    device.push_back(qkv_on_device(driver, in,
                                   {{nullptr, out.size() * 2},
                                    {nullptr, lse.size() * sizeof(float)},
                                    {nullptr, std::max<std::size_t>(workspace_bytes, 16)}}));
    mods.push_back(std::make_unique<DeviceModifiers>(driver, in.modifiers));
  }
  return time_runs(runtime, o, [&](int set) {
    const cuda::DeviceBuffers& d = *device[static_cast<std::size_t>(set)];
    const DeviceModifiers& m = *mods[static_cast<std::size_t>(set)];
    run({d.at(0), d.at(1), d.at(2), d.at(3), static_cast<float*>(d.at(4)), m.sinks(), m.alibi_slopes()}, d.at(5));
  });
}

}  // namespace

std::vector<std::uint16_t> random_bits(std::int64_t count, DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(count));
  for (auto& x : out) x = float_to_bits(dtype, normal(rng));
  return out;
}

void draw_qkv(const AttentionProblem& p, std::mt19937& rng, Inputs& in) {
  in.q = random_bits(q_extent(p), p.dtype, rng);
  in.k = random_bits(k_extent(p), p.k_dtype(), rng);
  in.v = random_bits(v_extent(p), p.k_dtype(), rng);
  // The kernels read fp8 tensors a byte an element.
  if (is_fp8(p.dtype)) in.q_fp8 = storage_bytes(p.dtype, in.q);
  if (is_fp8(p.k_dtype())) {
    in.k_fp8 = storage_bytes(p.k_dtype(), in.k);
    in.v_fp8 = storage_bytes(p.k_dtype(), in.v);
  }
}

std::unique_ptr<cuda::DeviceBuffers> qkv_on_device(cuda::Driver& driver, const Inputs& in,
                                                   std::initializer_list<cuda::DeviceBuffers::Spec> rest) {
  std::vector<cuda::DeviceBuffers::Spec> specs = {in.stored_q(), in.stored_k(), in.stored_v()};
  specs.insert(specs.end(), rest);
  return std::make_unique<cuda::DeviceBuffers>(driver, specs);
}

ModifierInputs modifier_inputs(const AttentionProblem& p, std::mt19937& rng) {
  ModifierInputs m;
  if (p.modifiers.sinks) {
    std::uniform_real_distribution<float> uniform(1.0F, 5.0F);
    m.sinks.resize(static_cast<std::size_t>(p.heads_q));
    for (float& sink : m.sinks) sink = uniform(rng);
  }
  const std::int64_t slopes = alibi_extent(p);
  m.alibi_slopes.reserve(static_cast<std::size_t>(slopes));
  for (std::int64_t i = 0; i < slopes; ++i) {
    const auto h = static_cast<double>(i % p.heads_q);
    m.alibi_slopes.push_back(static_cast<float>(std::exp2(-8.0 * (h + 1) / static_cast<double>(p.heads_q))));
  }
  return m;
}

ScoreModifiers gate_modifiers(const ScoreModifiers& modifiers) {
  ScoreModifiers gate = modifiers;
  if (gate.softcap != 0) gate.softcap = std::min(gate.softcap, kGateSoftcap);
  return gate;
}

Timing time_runs(Runtime& runtime, const TuneOptions& o, const std::function<void(int)>& run) {
  std::vector<double> times;
  for (int r = 0; r < o.warmup + o.repetitions; ++r) {
    double ms = 0;
    if (runtime.backend() == Backend::kEmu) {
      const auto start = std::chrono::steady_clock::now();
      run(r % 2);
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    } else {
      ms = cuda::Driver::get().time_ms(nullptr, [&] { run(r % 2); });
    }
    if (r >= o.warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.back() - times.front()};
}

Measurement measure(Runtime& runtime, const Task& task, const TuneOptions& options) {
  const bool backward = task.op == Op::kBackward;
  Measurement m;
  try {
    double max_error = 0;
    std::string why;
    m.ok =
        backward ? passes_backward_gate(runtime, task, &max_error, &why) : passes_gate(runtime, task, &max_error, &why);
    m.max_error = max_error;
    if (!m.ok) {
      m.error = "wrong result: " + why;
      return m;
    }
    const Timing t = backward ? time_backward(runtime, task, options) : time_task(runtime, task, options);
    m.median_ms = t.median_ms;
    m.spread_ms = t.spread_ms;
    const double flops = backward ? backward_flops(task.problem) : forward_flops(task.problem);
    m.tflops = flops / (t.median_ms * 1e-3) / 1e12;
  } catch (const Error& e) {
    // A variant that cannot run (or that the emulator finds a bug in) is a
    // failed measurement: recorded, never best, and the sweep goes on.
    m.ok = false;
    m.error = e.what();
  }
  return m;
}

std::size_t precompile(const std::vector<Task>& tasks, const std::string& arch,
                       const std::filesystem::path& cache_directory, unsigned threads) {
  KernelCache cache({.directory = cache_directory});
  CompilerService service(&cache, threads);
  std::vector<std::shared_future<CompilerService::Result>> pending;
  pending.reserve(tasks.size());
  // Kernels are compiled for the compute dtype (bf16 under fp8 Q; fp8 loads are a feature of the variant).
  for (const Task& task : tasks) {
    pending.push_back(service.compile({task.variant, task.problem.compute_dtype(), arch}));
  }
  std::size_t failed = 0;
  for (const auto& result : pending) failed += result.get()->ok ? 0 : 1;  // shared compiles count per task
  return failed;
}

tuning_db::ProblemRecord problem_record(Op op, const AttentionProblem& p) {
  return {.key = problem_key(op, p),
          .seqlen_q = p.seqlen_q,
          .seqlen_k = p.seqlen_k,
          .batch = p.batch,
          .heads_q = p.heads_q,
          .heads_kv = p.heads_kv};
}

TuneSummary run_sweep(const std::vector<Task>& tasks, Runtime& runtime, tuning_db::TuningDb& db,
                      const TuneOptions& options) {
  if (options.repetitions < 1)
    throw InvalidArgument("repetitions: got " + std::to_string(options.repetitions) + "; expected at least 1");
  const auto start = std::chrono::steady_clock::now();
  const tuning_db::DeviceRowId device =
      db.upsert_device({.key = runtime.device_key(), .name = runtime.device_name(), .nvrtc_version = nvrtc_version()});
  TuneSummary summary;
  Progress progress{.total = tasks.size()};
  // In this process a lost context fails every candidate alike: stop rather
  // than record them all as failed (a worker dies with its context).
  const cuda::Driver* in_process =
      !options.isolate && runtime.backend() == Backend::kCuda ? &cuda::Driver::get() : nullptr;
  for (const Task& task : tasks) {
    progress.current = task_variant_id(task) + " on " + problem_key(task_op(task), task.problem).to_string();
    const tuning_db::TemplateRowId tmpl =
        db.upsert_template(task.variant.kernel->name, task.variant.kernel->source_hash);
    const tuning_db::VariantRowId variant = db.upsert_variant(tmpl, task_variant_id(task));
    const tuning_db::ProblemRowId problem = db.upsert_problem(problem_record(task_op(task), task.problem));
    if (db.has_measurement(device, problem, variant)) {
      ++summary.skipped;
      ++progress.skipped;
    } else {
      tuning_db::MeasurementRecord m{.device = device,
                                     .problem = problem,
                                     .variant = variant,
                                     .nvrtc_version = nvrtc_version(),
                                     .attune_version = attune_version()};
      if (in_process != nullptr) in_process->check_usable();
      const Measurement result = options.isolate ? measure_in_worker(task, options) : measure(runtime, task, options);
      m.ok = result.ok;
      m.max_error = result.max_error;
      m.median_ms = result.median_ms;
      m.spread_ms = result.spread_ms;
      m.tflops = result.tflops;
      m.repetitions = result.ok ? options.repetitions : 0;
      m.error = result.ok ? "" : result.error;
      db.record_measurement(m);
      if (in_process != nullptr && in_process->lost_context() != nullptr) {
        throw ContextLost("tune: " + task_variant_id(task) + " lost the CUDA context (" + result.error +
                          "); it is recorded as failed and the sweep stops here: rerun to resume in a new process, "
                          "or use --isolate yes");
      }
      if (m.ok) {
        ++summary.measured;
      } else {
        ++summary.failed;
        ++progress.failed;
      }
    }
    ++progress.done;
    progress.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.on_progress) options.on_progress(progress);
  }
  return summary;
}

}  // namespace attune::tuner
