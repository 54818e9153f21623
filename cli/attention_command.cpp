#include "cli/attention_command.h"

#include "cli/attention_backward.h"
#include "cli/modifier_inputs.h"
#include "cli/npy_inputs.h"
#include "cli/problem_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/problem.h"
#include "io/npy.h"
#include "reference/reference.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_call.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/runtime.h"

namespace attune::cli {

namespace {

// How the call runs on a runtime: the forward kernel, or split-KV decode.
struct RunChoice {
  std::string variant_id;  // empty: the runtime's choice
  std::string db_path;
  bool decode = false;
  int splits = 0;  // decode: 0 for the built-in choice
  int repeat = 0;  // > 0: plan once, then a warm-up run and `repeat` timed runs
};

// Backend memory for a repeated call's length arrays and workspace, made
// before the first run: the runs themselves only launch.
class RunMemory {
 public:
  RunMemory(Backend backend, const AttentionProblem& p, std::size_t workspace_bytes) {
    const auto host = [](const std::vector<std::int32_t>& a) { return a.empty() ? nullptr : a.data(); };
    const std::vector<const std::vector<std::int32_t>*> arrays = {&p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqlens_k,
                                                                  &p.block_table};
    if (backend == Backend::kEmu) {
      metadata_ = {host(p.cu_seqlens_q), host(p.cu_seqlens_k), host(p.seqlens_k), host(p.block_table)};
      host_workspace_.resize((workspace_bytes + sizeof(float) - 1) / sizeof(float));
      workspace_ = {host_workspace_.data(), workspace_bytes};
      return;
    }
    std::vector<cuda::DeviceBuffers::Spec> specs;
    specs.reserve(arrays.size() + 1);
    for (const auto* a : arrays) specs.push_back({host(*a), std::max<std::size_t>(a->size() * 4, 4)});
    specs.push_back({nullptr, std::max<std::size_t>(workspace_bytes, 16)});
    device_.emplace(cuda::Driver::get(), specs);
    const auto at = [&](std::size_t i) -> const std::int32_t* {
      return arrays[i]->empty() ? nullptr : static_cast<const std::int32_t*>(device_->at(i));
    };
    metadata_ = {at(0), at(1), at(2), at(3)};
    workspace_ = {device_->at(4), workspace_bytes};
  }
  const DeviceMetadata& metadata() const { return metadata_; }
  Workspace workspace() const { return workspace_; }

 private:
  DeviceMetadata metadata_;
  Workspace workspace_;
  std::vector<float> host_workspace_;
  std::optional<cuda::DeviceBuffers> device_;
};

// The CLI's own stream on device 0, as a serving engine has one: runs on a
// stream launch into its context without touching the current one.
class Stream {
 public:
  explicit Stream(cuda::Driver& driver) : driver_(driver), stream_(driver.create_stream(0)) {}
  ~Stream() { driver_.destroy_stream(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }

 private:
  cuda::Driver& driver_;
  void* stream_;
};

// --repeat: plans once, runs once to warm up and `repeat` times more, and
// prints the plan and the median host time of a run.
void run_repeated(Runtime& runtime, Backend backend, const AttentionProblem& problem, const AttentionBuffers& buffers,
                  const RunChoice& choice, void* stream) {
  const Op op = choice.decode ? Op::kDecode : Op::kForward;
  Plan plan;
  if (choice.variant_id.empty()) {
    plan = runtime.plan(problem, op, {.splits = choice.splits});
  } else {
    const Variant variant = parse_variant_id(choice.variant_id);
    const int splits = choice.decode && choice.splits == 0 ? runtime.explain_decode(problem).splits : choice.splits;
    plan = runtime.plan_variant(variant, problem, {.splits = splits});
  }
  const RunMemory memory(backend, problem, plan.workspace_bytes());
  const auto once = [&] { runtime.run(plan, buffers, memory.metadata(), memory.workspace(), stream); };
  once();
  std::vector<double> micros;
  for (int i = 0; i < choice.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  if (backend == Backend::kCuda) cuda::Driver::get().synchronize(stream);
  std::sort(micros.begin(), micros.end());
  const std::size_t n = micros.size();
  const double median = n % 2 == 1 ? micros[n / 2] : (micros[n / 2 - 1] + micros[n / 2]) / 2;
  std::printf("plan: %s\n", plan.describe().c_str());
  std::printf("host time per run: median %.2f us over %d runs (after one warm-up run; %s backend)\n", median,
              choice.repeat, std::string(to_string(backend)).c_str());
}

// fp8 descales as the problem reads them (DescaleStrides): empty where a
// tensor has none.
struct Descales {
  std::vector<float> q, k, v;
  ModifierTensors add_to(ModifierTensors t) const {
    const auto at = [](const std::vector<float>& d) { return d.empty() ? nullptr : d.data(); };
    t.q_descale = at(q);
    t.k_descale = at(k);
    t.v_descale = at(v);
    return t;
  }
};

// --q-descale and the rest: a number, or a float .npy of [Hkv] or [B, Hkv]
// values (or one value). All three are brought to the widest layout given,
// which sets the problem's descale strides.
Descales read_descales(const AttentionOptions& o, ProblemOptions& options, std::int64_t batch, std::int64_t heads_kv) {
  struct Given {
    const char* flag;
    const std::string* text;
    std::vector<float> values;
    std::vector<std::int64_t> shape;
  };
  Given given[] = {{"--q-descale", &o.q_descale, {}, {}},
                   {"--k-descale", &o.k_descale, {}, {}},
                   {"--v-descale", &o.v_descale, {}, {}}};
  int rank = 0;  // 0: one per tensor, 1: per KV head, 2: per (batch, KV head)
  for (Given& g : given) {
    if (g.text->empty()) continue;
    double number = 0;
    const auto [end, error] = std::from_chars(g.text->data(), g.text->data() + g.text->size(), number);
    if (error == std::errc() && end == g.text->data() + g.text->size()) {
      g.values = {static_cast<float>(number)};
    } else {
      const npy::Array array = read_floats(*g.text, g.flag + 2);
      g.values = array.to_float32();
      g.shape = array.shape;
      const std::vector<std::int64_t> per_head = {heads_kv};
      const std::vector<std::int64_t> per_batch_head = {batch, heads_kv};
      if (g.values.size() != 1 && g.shape != per_head && g.shape != per_batch_head) {
        bad_flag(g.flag, *g.text + " of " + std::to_string(g.values.size()) + " values",
                 "a number, or a float array of one value, [Hkv] = [" + std::to_string(heads_kv) + "] or [B, Hkv] = [" +
                     std::to_string(batch) + ", " + std::to_string(heads_kv) + "]");
      }
      if (g.values.size() != 1) rank = std::max(rank, static_cast<int>(g.shape.size()));
    }
    for (float f : g.values) {
      if (!std::isfinite(f)) bad_flag(g.flag, *g.text, "finite descale factors");
    }
  }
  const std::int64_t count = rank == 2 ? batch * heads_kv : rank == 1 ? heads_kv : 1;
  options.descale_strides = {.batch = rank == 2 ? heads_kv : 0, .head = rank >= 1 ? 1 : 0};
  const auto widen = [&](const Given& g) {
    std::vector<float> out;
    if (g.values.empty()) return out;
    for (std::int64_t i = 0; i < count; ++i) {
      const bool one = g.values.size() == 1;
      const std::int64_t head = rank >= 1 ? i % heads_kv : 0;
      out.push_back(one                   ? g.values[0]
                    : g.shape.size() == 1 ? g.values[static_cast<std::size_t>(head)]
                                          : g.values[static_cast<std::size_t>(i)]);
    }
    return out;
  };
  return {widen(given[0]), widen(given[1]), widen(given[2])};
}

ReferenceOutput run_on_runtime(Backend backend, const AttentionProblem& problem, const std::vector<std::uint16_t>& q,
                               const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v,
                               const ModifierInputs& mods, const Descales& descales, const RunChoice& choice) {
  const std::string& variant_id = choice.variant_id;
  const std::string& db_path = choice.db_path;
  const std::optional<tuning_db::TuningDb> db = open_db_for_dispatch(db_path);
  const std::optional<DbTunedSource> tuned = db ? std::optional<DbTunedSource>(std::in_place, *db) : std::nullopt;
  Runtime runtime({.backend = backend, .tuned = tuned ? &*tuned : nullptr});
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(problem)));
  std::vector<float> lse(static_cast<std::size_t>(lse_extent(problem)));
  const auto run = [&](const AttentionBuffers& buffers, void* stream) {
    if (choice.repeat > 0) {
      run_repeated(runtime, backend, problem, buffers, choice, stream);
    } else if (choice.decode) {
      if (variant_id.empty()) {
        runtime.decode(problem, buffers, {.splits = choice.splits}, stream);
      } else {
        const Variant variant = parse_variant_id(variant_id);
        const int splits = choice.splits > 0 ? choice.splits : runtime.explain_decode(problem).splits;
        runtime.decode_variant(variant, splits, problem, buffers, stream);
      }
    } else if (variant_id.empty()) {
      runtime.forward(problem, buffers, stream);
    } else {
      runtime.forward_variant(parse_variant_id(variant_id), problem, buffers, stream);
    }
  };
  // The kernels read the stored bytes: 1 per fp8 element.
  const std::vector<std::uint8_t> q_bytes = storage_bytes(problem.dtype, q);
  const std::vector<std::uint8_t> k_bytes = storage_bytes(problem.k_dtype(), k);
  const std::vector<std::uint8_t> v_bytes = storage_bytes(problem.k_dtype(), v);
  const auto with_descales = [](AttentionBuffers b, const ModifierTensors& d) {
    b.q_descale = d.q_descale;
    b.k_descale = d.k_descale;
    b.v_descale = d.v_descale;
    return b;
  };
  if (backend == Backend::kEmu) {
    const ModifierTensors host = mods.host();
    run(with_descales(
            {q_bytes.data(), k_bytes.data(), v_bytes.data(), o.data(), lse.data(), host.sinks, host.alibi_slopes},
            descales.add_to({})),
        nullptr);
  } else {
    cuda::Driver& driver = cuda::Driver::get();
    const Stream stream(driver);
    const DeviceModifiers device_mods(driver, mods);
    cuda::run_on_device(
        driver, stream.get(),
        {cuda::in(q_bytes), cuda::in(k_bytes), cuda::in(v_bytes), cuda::out(o), cuda::out(lse), cuda::in(descales.q),
         cuda::in(descales.k), cuda::in(descales.v)},
        [&](const std::vector<void*>& d) {
          const auto at = [&](std::size_t i, const std::vector<float>& host) {
            return host.empty() ? nullptr : static_cast<const float*>(d[i]);
          };
          run(with_descales(
                  {d[0], d[1], d[2], d[3], static_cast<float*>(d[4]), device_mods.sinks(), device_mods.alibi_slopes()},
                  {.q_descale = at(5, descales.q), .k_descale = at(6, descales.k), .v_descale = at(7, descales.v)}),
              stream.get());
        });
  }
  ReferenceOutput out;
  out.o = widen_bits<double>(problem.compute_dtype(), o);
  out.lse.assign(lse.begin(), lse.end());
  return out;
}

}  // namespace

void set_dropout(const AttentionOptions& o, ScoreModifiers& modifiers) {
  if (!o.dropout) {
    if (o.seed) bad_flag("--seed", std::to_string(*o.seed), "--dropout P with it");
    if (o.offset) bad_flag("--offset", std::to_string(*o.offset), "--dropout P with it");
    return;
  }
  if (!(*o.dropout >= 0 && *o.dropout < 1)) {
    std::ostringstream seen;
    seen << *o.dropout;
    bad_flag("--dropout", seen.str(), "a probability p in [0, 1) (0: no dropout)");
  }
  modifiers.dropout_p = *o.dropout;
  modifiers.seed = o.seed.value_or(0);
  modifiers.offset = o.offset.value_or(0);
}

CLI::App* add_attention_command(CLI::App& app, AttentionOptions& o) {
  CLI::App* cmd = app.add_subcommand("attention", "Run one attention call on .npy inputs and write O (and LSE)");
  cmd->add_option("--backend", o.backend,
                  "Backend that computes: reference (fp64 oracle), emu (kernel on the CPU emulator) or cuda")
      ->capture_default_str();
  cmd->add_option("--q", o.q_path, "Q: float32/float16 [B,Sq,Hq,Dk], or [Tq,Hq,Dk] with cu_seqlens")->required();
  CLI::Option* k = cmd->add_option("--k", o.k_path, "K: [B,Sk,Hkv,Dk], or [Tk,Hkv,Dk]");
  CLI::Option* v = cmd->add_option("--v", o.v_path, "V: [B,Sk,Hkv,Dv], or [Tk,Hkv,Dv]");
  cmd->add_option("--out", o.out_path,
                  "O output: float32 [B,Sq,Hq,Dv] (packed: [Tq,Hq,Dv]); required unless --backward");
  cmd->add_option("--lse", o.lse_path, "LSE output: float32 [B,Hq,Sq] (packed: [Hq,Tq])");
  cmd->add_option("--dtype", o.dtype,
                  "Storage dtype the inputs are rounded to: fp16, bf16, or e4m3 / e5m2 (fp8 Q, K and V; O in bf16)")
      ->capture_default_str();
  cmd->add_option("--kv-dtype", o.kv_dtype,
                  "K and V's own storage: e4m3 or e5m2 (an fp8 KV cache under fp16 / bf16 queries; default: --dtype)");
  cmd->add_option("--q-descale", o.q_descale,
                  "fp8 Q's descale: a number, or a float .npy [Hkv] or [B, Hkv]; Q is its stored value times it");
  cmd->add_option("--k-descale,--k-scale", o.k_descale,
                  "fp8 K's descale (vLLM's k_scale): a number, or a float .npy [Hkv] or [B, Hkv]");
  cmd->add_option("--v-descale,--v-scale", o.v_descale,
                  "fp8 V's descale (vLLM's v_scale): a number, or a float .npy [Hkv] or [B, Hkv]");
  cmd->add_option("--causal", o.causal, "Causal mask: bottom-right (j <= i + Sk - Sq) or top-left (j <= i)");
  cmd->add_option("--window", o.window, "Sliding window LEFT,RIGHT around the bottom-right diagonal (-1: unbounded)");
  cmd->add_option("--scale", o.scale, "Softmax scale (default 1/sqrt(Dk))");
  cmd->add_option("--seqlens-k", o.seqlens_k_path, "int32 [B]: keys per batch entry (key padding)");
  cmd->add_option("--cu-seqlens-q", o.cu_seqlens_q_path, "int32 [B+1]: packed query offsets");
  cmd->add_option("--cu-seqlens-k", o.cu_seqlens_k_path, "int32 [B+1]: packed key offsets");
  cmd->add_option("--db", o.db_path, "Tuning database to dispatch from (default: the default one, if it exists)");
  cmd->add_option("--variant", o.variant,
                  "Kernel variant id (emu and cuda backends; default: the dispatcher's choice)");
  CLI::Option* k_cache = cmd->add_option(
      "--k-cache", o.k_cache_path, "KV cache K (decode): [B,Smax,Hkv,Dk], or a page pool [pages,page_size,Hkv,Dk]");
  CLI::Option* v_cache = cmd->add_option(
      "--v-cache", o.v_cache_path, "KV cache V (decode): [B,Smax,Hkv,Dv], or a page pool [pages,page_size,Hkv,Dv]");
  cmd->add_option("--cache-seqlens", o.cache_seqlens_path, "int32 [B]: keys each sequence holds in the cache");
  cmd->add_option("--block-table", o.block_table_path, "int32 [B,max_pages]: the pages of each sequence (paged cache)");
  cmd->add_option("--page-size", o.page_size, "Keys per page of a paged cache (with --block-table)");
  cmd->add_option("--splits", o.splits,
                  "Split-KV decode: CTAs along the keys (1..256; 0: the built-in choice). Runs the decode kernel");
  cmd->add_flag("--backward", o.backward,
                "Backward: write dQ, dK, dV (the gradients of sum(dO * O)) for the forward these flags describe");
  cmd->add_option("--do", o.d_o_path, "Backward: dO, shaped like O");
  cmd->add_option("--dq", o.dq_path, "Backward: dQ output, float32, shaped like Q");
  cmd->add_option("--dk", o.dk_path, "Backward: dK output, float32, shaped like K");
  cmd->add_option("--dv", o.dv_path, "Backward: dV output, float32, shaped like V");
  cmd->add_option("--o-in", o.o_in_path, "Backward: the forward's O (default: computed)");
  cmd->add_option("--lse-in", o.lse_in_path, "Backward: the forward's LSE, float32 (default: computed)");
  cmd->add_option("--softcap", o.softcap,
                  "Logit softcapping c > 0: scores s become c * tanh(s / c) before masking (Gemma 2, Grok)");
  cmd->add_option("--sinks", o.sinks_path,
                  "float [Hq]: one sink logit per query head, an extra softmax term with no value (gpt-oss)");
  cmd->add_option("--alibi-slopes", o.alibi_slopes_path,
                  "float [Hq] or [B,Hq]: ALiBi, -slope * |i + Sk - Sq - j| added to the scores");
  cmd->add_option("--dropout", o.dropout,
                  "Attention dropout p in [0, 1): each probability kept with probability 1 - p and scaled by "
                  "1 / (1 - p), or zeroed (the forward and its --backward draw the same mask)");
  cmd->add_option("--seed", o.seed, "Dropout: the Philox seed of the mask (default 0)");
  cmd->add_option("--offset", o.offset, "Dropout: the Philox offset of the mask (default 0)");
  cmd->add_option("--dsink", o.dsink_path, "Backward with --sinks: dsink output, float32 [Hq]");
  cmd->add_option("--repeat", o.repeat,
                  "Plan once, run once to warm up, then N more times and print the median host time per run "
                  "(emu and cuda backends; the runs allocate, copy and synchronize nothing)");
  cmd->add_flag("--deterministic", o.deterministic,
                "Backward: dQ summed per key block in a fixed order (bitwise-repeatable gradients)");
  k->excludes(k_cache);
  v->excludes(v_cache);
  k_cache->needs(v_cache);
  v_cache->needs(k_cache);
  return cmd;
}

void run_attention(const AttentionOptions& o) {
  if (o.backward) {
    check_backward_flags(o);
  } else {
    for (const auto& [flag, value] :
         {std::pair{"--do", &o.d_o_path}, std::pair{"--dq", &o.dq_path}, std::pair{"--dk", &o.dk_path},
          std::pair{"--dv", &o.dv_path}, std::pair{"--o-in", &o.o_in_path}, std::pair{"--lse-in", &o.lse_in_path},
          std::pair{"--dsink", &o.dsink_path}}) {
      if (!value->empty()) bad_flag(flag, *value, "--backward with it");
    }
    if (o.out_path.empty()) bad_flag("--out", "(missing)", "a path for O");
  }
  const std::optional<Backend> backend = o.backend == "reference" ? std::nullopt : parse_backend(o.backend);
  if (o.backend != "reference" && !backend) bad_flag("--backend", o.backend, "reference, emu or cuda");
  if (!o.variant.empty() && o.backend == "reference") {
    bad_flag("--variant", o.variant, "no --variant with --backend reference (it has no kernel variants)");
  }
  ProblemOptions options;
  options.dtype = parse_dtype_flag(o.dtype);
  if (!o.kv_dtype.empty()) {
    const std::optional<DType> kv = parse_dtype(o.kv_dtype);
    if (!kv || !is_fp8(*kv)) bad_flag("--kv-dtype", o.kv_dtype, "e4m3 or e5m2 (an fp8 KV cache)");
    options.kv_dtype = kv;
  }
  options.mask = parse_mask(o.causal, o.window);
  options.scale = o.scale;
  options.seqlens_k = read_lengths(o.seqlens_k_path, "seqlens_k");
  options.cu_seqlens_q = read_lengths(o.cu_seqlens_q_path, "cu_seqlens_q");
  options.cu_seqlens_k = read_lengths(o.cu_seqlens_k_path, "cu_seqlens_k");
  const bool cache = !o.k_cache_path.empty();
  if (!cache && (o.k_path.empty() || o.v_path.empty())) {
    bad_flag(o.k_path.empty() ? "--k" : "--v", "(missing)", "K and V as --k/--v, or a KV cache as --k-cache/--v-cache");
  }
  if (!o.cache_seqlens_path.empty()) {
    if (!o.seqlens_k_path.empty()) {
      bad_flag("--cache-seqlens", o.cache_seqlens_path, "either --cache-seqlens or --seqlens-k, not both");
    }
    options.seqlens_k = read_lengths(o.cache_seqlens_path, "cache_seqlens");
  }
  if (!o.block_table_path.empty() || o.page_size != 0) {
    if (o.block_table_path.empty()) bad_flag("--page-size", std::to_string(o.page_size), "a --block-table with it");
    if (o.page_size < 1) bad_flag("--page-size", std::to_string(o.page_size), "a page size >= 1 with --block-table");
    if (!cache) bad_flag("--block-table", o.block_table_path, "a paged cache given as --k-cache/--v-cache");
    options.page_size = o.page_size;
  }
  if (o.splits && (*o.splits < 0 || *o.splits > kMaxDecodeSplits)) {
    bad_flag("--splits", std::to_string(*o.splits),
             "1.." + std::to_string(kMaxDecodeSplits) + ", or 0 for the built-in choice");
  }
  if (o.repeat < 0) bad_flag("--repeat", std::to_string(o.repeat), "a run count >= 1 (0: one call, unplanned)");
  if (o.repeat > 0 && !backend) bad_flag("--repeat", std::to_string(o.repeat), "--backend emu or cuda with it");
  if (o.repeat > 0 && o.backward)
    bad_flag("--repeat", std::to_string(o.repeat), "a forward or decode call (not --backward)");
  const DType dtype = options.dtype;
  const DType kv_dtype = options.kv_dtype.value_or(dtype);

  const npy::Array q = read_floats(o.q_path, "Q");
  if (options.page_size != 0) {
    // One row per sequence: Q's batch, or cu_seqlens_q's sequences when packed.
    const std::int64_t sequences = !options.cu_seqlens_q.empty()
                                       ? static_cast<std::int64_t>(options.cu_seqlens_q.size()) - 1
                                       : (q.shape.empty() ? 0 : q.shape[0]);
    options.block_table = read_block_table(o.block_table_path, sequences);
  }
  const npy::Array k = cache ? read_floats(o.k_cache_path, "K cache") : read_floats(o.k_path, "K");
  const npy::Array v = cache ? read_floats(o.v_cache_path, "V cache") : read_floats(o.v_path, "V");
  const ModifierInputs mods = read_modifier_inputs(o.softcap, o.sinks_path, o.alibi_slopes_path, options);
  set_dropout(o, options.modifiers);
  // K's heads: dim 2 of [B, S, H, D] (and of a page pool), dim 1 of packed [T, H, D].
  const std::int64_t heads_kv = k.shape.size() >= 3 ? k.shape[k.shape.size() - 2] : 1;
  const std::int64_t sequences = !options.cu_seqlens_q.empty()
                                     ? static_cast<std::int64_t>(options.cu_seqlens_q.size()) - 1
                                     : (q.shape.empty() ? 0 : q.shape[0]);
  const Descales descales = read_descales(o, options, sequences, heads_kv);
  if (!is_fp8(dtype) && !o.q_descale.empty()) {
    bad_flag("--q-descale", o.q_descale, "--dtype e4m3 or e5m2 with it (fp8 queries)");
  }
  if (!is_fp8(kv_dtype)) {
    for (const auto& [flag, text] : {std::pair{"--k-descale", &o.k_descale}, std::pair{"--v-descale", &o.v_descale}}) {
      if (!text->empty()) bad_flag(flag, *text, "--dtype or --kv-dtype e4m3 / e5m2 with it (fp8 K and V)");
    }
  }
  const AttentionProblem problem = make_problem(q.shape, k.shape, v.shape, std::move(options));
  check_modifier_inputs(mods, problem);

  const std::vector<std::uint16_t> q_bits = to_storage(q, dtype);
  const std::vector<std::uint16_t> k_bits = to_storage(k, kv_dtype);
  const std::vector<std::uint16_t> v_bits = to_storage(v, kv_dtype);
  if (o.backward) {
    validate_backward(problem);  // fp8 and paged caches are forward-only
    run_backward(o, backend, problem, {q_bits, k_bits, v_bits}, {q.shape, k.shape, v.shape}, mods);
    return;
  }
  // The reference is exact: splits do not change what it computes.
  const RunChoice choice{
      .variant_id = o.variant,
      .db_path = o.db_path,
      // A paged cache with long query chunks runs the forward kernel
      // (Runtime::plan's rule), unless splits or a decode variant are asked.
      .decode = o.splits.has_value() || o.variant.rfind("flash_decode/", 0) == 0 ||
                (cache && o.variant.empty() && (!problem.is_paged() || paged_forward_op(problem) == Op::kDecode)),
      .splits = o.splits.value_or(0),
      .repeat = o.repeat};
  const ReferenceOutput out =
      backend ? run_on_runtime(*backend, problem, q_bits, k_bits, v_bits, mods, descales, choice)
              : reference_forward(problem, q_bits.data(), k_bits.data(), v_bits.data(), descales.add_to(mods.host()));

  std::vector<int64_t> o_shape = {problem.seqlen_q, problem.heads_q, problem.head_dim_v};
  std::vector<int64_t> lse_shape = {problem.heads_q, problem.seqlen_q};
  if (!problem.is_packed()) {
    o_shape.insert(o_shape.begin(), problem.batch);
    lse_shape.insert(lse_shape.begin(), problem.batch);
  }
  npy::write(o.out_path, o_shape, to_float32(out.o));
  if (!o.lse_path.empty()) npy::write(o.lse_path, lse_shape, to_float32(out.lse));
}

}  // namespace attune::cli
