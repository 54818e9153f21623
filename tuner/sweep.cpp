#include "tuner/sweep.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "profile/profile.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/dispatch/tuned_id.h"
#include "runtime/launch/flash_decode_params.h"

namespace attune::tuner {

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::int64_t positive(const std::string& axis, const std::string& text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) {
    throw InvalidArgument(axis + ": got '" + text + "'; expected a positive integer");
  }
  return value;
}

}  // namespace

void set_axis(SweepSpec& spec, const std::string& axis, const std::string& values) {
  const std::vector<std::string> items = split(values);
  if (items.empty() && axis != "max_variants") throw InvalidArgument(axis + ": got no values; expected a list");
  if (axis == "dtypes") {
    spec.dtypes.clear();
    for (const std::string& item : items) {
      const auto dtype = parse_dtype(item);
      if (!dtype) throw InvalidArgument("dtypes: got '" + item + "'; expected fp16, bf16, e4m3 or e5m2");
      spec.dtypes.push_back(*dtype);
    }
  } else if (axis == "kv_dtype") {
    const auto dtype = items.size() == 1 ? parse_dtype(items.front()) : std::nullopt;
    if (!dtype || !is_fp8(*dtype)) {
      throw InvalidArgument("kv_dtype: got '" + trim(values) + "'; expected e4m3 or e5m2 (an fp8 KV cache)");
    }
    spec.kv_dtype = dtype;
  } else if (axis == "head_dims") {
    spec.head_dims.clear();
    for (const std::string& item : items) {
      const std::int64_t d = positive(axis, item);
      if (d > kMaxHeadDim) throw InvalidArgument("head_dims: got " + item + "; expected 1..256");
      spec.head_dims.push_back(static_cast<int>(d));
    }
  } else if (axis == "masks") {
    spec.masks.clear();
    for (const std::string& item : items) {
      if (item == "none") {
        spec.masks.push_back(Mask::none());
      } else if (item == "causal" || item == "causal-bottom-right") {
        spec.masks.push_back(Mask::causal_bottom_right());
      } else if (item == "causal-top-left") {
        spec.masks.push_back(Mask::causal_top_left());
      } else {
        throw InvalidArgument("masks: got '" + item + "'; expected none, causal or causal-top-left");
      }
    }
  } else if (axis == "modifiers") {
    spec.modifiers.clear();
    for (const std::string& item : items) {
      const std::optional<std::uint8_t> bits = parse_modifier_names(item);
      if (!bits) {
        throw InvalidArgument(
            "modifiers: got '" + item +
            "'; expected none, or softcap, sinks, alibi and dropout joined by '+' (e.g. softcap+sinks)");
      }
      // Each set once (in any spelling): a set named twice is the same key.
      if (std::find(spec.modifiers.begin(), spec.modifiers.end(), *bits) == spec.modifiers.end()) {
        spec.modifiers.push_back(*bits);
      }
    }
  } else if (axis == "softcap") {
    double c = 0;
    const std::string& text = items.front();
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), c);
    if (items.size() != 1 || error != std::errc() || end != text.data() + text.size() || !std::isfinite(c) || c <= 0) {
      throw InvalidArgument("softcap: got '" + values + "'; expected one positive number, e.g. 30");
    }
    spec.softcap = c;
  } else if (axis == "dropout") {
    double p = 0;
    const std::string& text = items.front();
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), p);
    if (items.size() != 1 || error != std::errc() || end != text.data() + text.size() || !(p > 0 && p < 1)) {
      throw InvalidArgument("dropout: got '" + values + "'; expected one probability in (0, 1), e.g. 0.1");
    }
    spec.dropout = p;
  } else if (axis == "seqlens") {
    spec.seqlens.clear();
    for (const std::string& item : items) spec.seqlens.push_back(positive(axis, item));
  } else if (axis == "batch_heads") {
    spec.batch_heads.clear();
    for (const std::string& item : items) {
      const auto x = item.find('x');
      if (x == std::string::npos) throw InvalidArgument("batch_heads: got '" + item + "'; expected BxH, e.g. 4x16");
      const std::int64_t batch = positive(axis, item.substr(0, x));
      const std::int64_t heads = positive(axis, item.substr(x + 1));
      // The kernels index B x H in int32: larger products are no problem a GPU runs.
      if (batch > std::numeric_limits<std::int32_t>::max() / heads) {
        throw InvalidArgument("batch_heads: got '" + item + "'; expected B x H below 2^31");
      }
      spec.batch_heads.emplace_back(batch, heads);
    }
  } else if (axis == "order") {
    if (items.size() != 1 || (items.front() != "list" && items.front() != "model")) {
      throw InvalidArgument("order: got '" + values + "'; expected list or model");
    }
    spec.order = items.front();
  } else if (axis == "max_variants") {
    spec.max_variants = items.empty() ? 0 : static_cast<int>(positive(axis, items.front()));
  } else if (axis == "op") {
    if (items.size() != 1 || !parse_op(items.front())) {
      throw InvalidArgument("op: got '" + values + "'; expected fwd, bwd or decode");
    }
    spec.op = items.front();
  } else if (axis == "queries") {
    spec.queries.clear();
    for (const std::string& item : items) spec.queries.push_back(positive(axis, item));
  } else if (axis == "gqa") {
    if (items.size() != 1) throw InvalidArgument("gqa: got '" + values + "'; expected one group size");
    spec.gqa = positive(axis, items.front());
  } else if (axis == "splits") {
    spec.splits.clear();
    for (const std::string& item : items) {
      if (item == "0" || item == "auto") {
        spec.splits.push_back(0);
        continue;
      }
      const std::int64_t n = positive(axis, item);
      if (n > kMaxDecodeSplits) {
        throw InvalidArgument("splits: got " + item + "; expected 1.." + std::to_string(kMaxDecodeSplits) + " or auto");
      }
      spec.splits.push_back(static_cast<int>(n));
    }
  } else {
    throw InvalidArgument(
        "sweep axis: got '" + axis +
        "'; expected dtypes, kv_dtype, head_dims, masks, modifiers, softcap, dropout, seqlens, batch_heads, "
        "max_variants, order, op, "
        "queries, gqa or splits");
  }
}

SweepSpec read_sweep_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path.string() + ": cannot read the sweep file");
  SweepSpec spec;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw InvalidArgument(path.string() + ":" + std::to_string(number) + ": got '" + line +
                            "'; expected 'axis = values'");
    }
    try {
      set_axis(spec, trim(line.substr(0, eq)), line.substr(eq + 1));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(path.string() + ":" + std::to_string(number) + ": " + e.what());
    }
  }
  return spec;
}

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) throw InvalidArgument("--shard: got '" + text + "'; expected K/N, e.g. 0/4");
  const std::int64_t n = positive("--shard N", text.substr(slash + 1));
  std::int64_t k = 0;
  const std::string ks = text.substr(0, slash);
  const auto [end, error] = std::from_chars(ks.data(), ks.data() + ks.size(), k);
  if (error != std::errc() || end != ks.data() + ks.size() || k < 0 || k >= n) {
    throw InvalidArgument("--shard: got '" + text + "'; expected K/N with 0 <= K < N");
  }
  return {static_cast<int>(k), static_cast<int>(n)};
}

namespace {

// The speed model's bound of a variant on the architecture, remembered per
// (variant, dtype, arch): the emulation behind it is the expensive part.
double predicted_tflops(Variant v, DType dtype, const ArchLimits& arch) {
  // The model emulates 16-bit tiles: an fp8 variant is ranked by its tile
  // (the fp8 loads are a feature of the problem, not a tuned choice).
  v.modifiers = static_cast<std::uint8_t>(v.modifiers & ~kFeatureFp8);
  static std::mutex mutex;
  static std::map<std::string, double> known;
  const std::string key = v.id() + "/" + std::string(to_string(dtype)) + "/" + arch.name;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  const profile::ArchRates rates = profile::arch_rates(arch.name);
  const double tflops =
      profile::bound_of(profile::emulate_per_key_tile(v, dtype), rates, rates.sm_count, rates.clock_ghz).tflops;
  const std::lock_guard<std::mutex> lock(mutex);
  return known.emplace(key, tflops).first->second;
}

// The variants of a problem class (with its features compiled in: modifier
// bits, and fp8 inputs, which leave the families without fp8 out): all of
// them, or max_variants of them (spread over the list, or the model's best),
// the heuristic's always among them. With the model's order the list comes
// best first. Kernels are compiled for the compute dtype (bf16 under fp8 Q).
std::vector<Variant> sweep_variants(const SweepSpec& spec, const AttentionProblem& problem, const ArchLimits& arch,
                                    const Variant& heuristic) {
  const DType dtype = problem.compute_dtype();
  const int d = static_cast<int>(problem.head_dim_k);
  std::vector<Variant> variants = enumerate_variants(spec.op, dtype, d, d, arch, problem_features(problem));
  // The op's Hopper family only where it takes the problem (sm90_fit_for:
  // fp8 only as e4m3 Q, K and V; score modifiers in the backward only).
  if (const std::optional<Op> op = parse_op(spec.op); op && !sm90_fit_for(*op, problem).fits()) {
    std::erase_if(variants, [&](const Variant& v) { return v.kernel != &kernel_for_op(spec.op); });
  }
  if (spec.order == "model") {
    std::vector<std::pair<double, Variant>> ranked;
    ranked.reserve(variants.size());
    for (const Variant& v : variants) ranked.emplace_back(predicted_tflops(v, dtype, arch), v);
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    variants.clear();
    for (const auto& [tflops, v] : ranked) variants.push_back(v);
    if (spec.max_variants > 0 && static_cast<int>(variants.size()) > spec.max_variants) {
      variants.resize(static_cast<std::size_t>(spec.max_variants));
      if (std::find(variants.begin(), variants.end(), heuristic) == variants.end()) variants.back() = heuristic;
    }
    return variants;
  }
  if (spec.max_variants > 0 && static_cast<int>(variants.size()) > spec.max_variants) {
    std::vector<Variant> few;
    const std::size_t step = variants.size() / static_cast<std::size_t>(spec.max_variants);
    for (std::size_t i = 0; i < variants.size() && few.size() + 1 < static_cast<std::size_t>(spec.max_variants);
         i += step) {
      few.push_back(variants[i]);
    }
    if (std::find(few.begin(), few.end(), heuristic) == few.end()) few.push_back(heuristic);
    variants = std::move(few);
  }
  return variants;
}

// Decode tasks of one problem: every variant with every split count of the
// sweep (0: the heuristic's count for that variant), each count once.
void add_decode_tasks(const SweepSpec& spec, const AttentionProblem& problem, const ArchLimits& arch, int sm_count,
                      std::vector<Task>& tasks) {
  for (const Variant& v :
       sweep_variants(spec, problem, arch, with_problem_features(heuristic_decode_variant(problem, arch), problem))) {
    std::vector<int> counts;
    for (int splits : spec.splits) {
      const int n = splits > 0 ? splits : heuristic_splits(problem, v, sm_count);
      if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
    }
    for (int n : counts) tasks.push_back({problem, v, n, Op::kDecode});
  }
}

// The KV cache's dtype of the sweep's problems of `dtype`: spec.kv_dtype
// where it differs from the dtype. fp8 has no backward, and fp8 queries take
// K and V in their own format only.
std::optional<DType> sweep_kv_dtype(const SweepSpec& spec, DType dtype) {
  const std::optional<DType> kv = spec.kv_dtype == dtype ? std::nullopt : spec.kv_dtype;
  if (spec.op == "bwd" && is_fp8(kv.value_or(dtype))) {
    throw InvalidArgument("dtypes: got " + storage_name(dtype, kv) +
                          " with op bwd; expected fp16 or bf16 inputs (fp8 is a forward and KV-cache format: "
                          "there is no fp8 backward)");
  }
  if (kv && is_fp8(dtype)) {
    throw InvalidArgument("kv_dtype: got " + std::string(to_string(*kv)) + " with dtype " +
                          std::string(to_string(dtype)) +
                          "; expected no kv_dtype, or the dtype's own format (fp8 queries read K and V in their "
                          "fp8 format)");
  }
  return kv;
}

}  // namespace

Op task_op(const Task& task) { return task.op; }

std::string task_variant_id(const Task& task) { return tuned_id(task.variant, task.splits); }

ScoreModifiers sweep_modifiers(std::uint8_t bits, double softcap, double dropout) {
  return {.softcap = (bits & kModSoftcap) != 0 ? softcap : 0,
          .sinks = (bits & kModSinks) != 0,
          .alibi = (bits & kModAlibi) != 0 ? AlibiSlopes::kPerHead : AlibiSlopes::kNone,
          .dropout_p = (bits & kModDropout) != 0 ? dropout : 0};
}

std::vector<Task> plan(const SweepSpec& spec, const ArchLimits& arch, Shard shard, int sm_count) {
  const bool decode = spec.op == "decode";
  std::vector<Task> tasks;
  for (DType dtype : spec.dtypes) {
    const std::optional<DType> kv_dtype = sweep_kv_dtype(spec, dtype);
    for (int d : spec.head_dims) {
      for (const Mask& mask : spec.masks) {
        for (std::uint8_t bits : spec.modifiers) {
          if (is_fp8(kv_dtype.value_or(dtype)) && (bits & kModDropout) != 0) {
            throw InvalidArgument("modifiers: got '" + modifier_names(bits) + "' with " +
                                  storage_name(dtype, kv_dtype) +
                                  " inputs; expected a set without dropout (fp8 is an inference format: no "
                                  "dropout with fp8 inputs)");
          }
          if (decode && (bits & kModDropout) != 0) {
            throw InvalidArgument("modifiers: got '" + modifier_names(bits) +
                                  "' with op decode; expected a set without dropout (the decode kernels serve "
                                  "inference, without dropout)");
          }
          const ProblemOptions options{.dtype = dtype,
                                       .kv_dtype = kv_dtype,
                                       .mask = mask,
                                       .modifiers = sweep_modifiers(bits, spec.softcap, spec.dropout)};
          for (std::int64_t s : spec.seqlens) {
            for (const auto& [b, h] : spec.batch_heads) {
              if (!decode) {
                const AttentionProblem problem =
                    make_problem(std::vector<std::int64_t>{b, s, h, d}, std::vector<std::int64_t>{b, s, h, d},
                                 std::vector<std::int64_t>{b, s, h, d}, options);
                const Op op = parse_op(spec.op).value_or(Op::kForward);
                // The portable family's choice where the Hopper family cannot take the problem (e5m2).
                const Variant heuristic =
                    with_problem_features(heuristic_variant(spec.op, problem.compute_dtype(), d, d, arch, bits,
                                                            {.portable_only = !sm90_fit_for(op, problem).fits()}),
                                          problem);
                for (const Variant& v : sweep_variants(spec, problem, arch, heuristic)) {
                  tasks.push_back({problem, v, 0, op});
                }
                continue;
              }
              for (std::int64_t sq : spec.queries) {
                // h KV heads, each read by `gqa` query heads; a full cache of s keys.
                const AttentionProblem problem =
                    make_problem(std::vector<std::int64_t>{b, sq, h * spec.gqa, d},
                                 std::vector<std::int64_t>{b, s, h, d}, std::vector<std::int64_t>{b, s, h, d}, options);
                add_decode_tasks(spec, problem, arch, sm_count, tasks);
              }
            }
          }
        }
      }
    }
  }
  std::vector<Task> mine;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(shard.count)) == shard.index) mine.push_back(std::move(tasks[i]));
  }
  return mine;
}

double forward_flops(const AttentionProblem& p) {
  return 4.0 * static_cast<double>(p.heads_q) * static_cast<double>(p.head_dim_k) * visible_pairs(p);
}

double backward_flops(const AttentionProblem& p) { return 2.5 * forward_flops(p); }

}  // namespace attune::tuner
