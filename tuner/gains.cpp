#include "tuner/gains.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "generator/variants.h"
#include "profile/profile.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/dispatch/tuned_id.h"
#include "runtime/runtime.h"
#include "tuner/sweep.h"

namespace attune::tuner {

namespace {

// The SM count in a device key ("NVIDIA H200/cc9.0/sm132"); the emulator's own.
int sm_count_of(const std::string& device_key) {
  const std::size_t at = device_key.rfind("/sm");
  if (at != std::string::npos) {
    int count = 0;
    const char* first = device_key.data() + at + 3;
    const char* last = device_key.data() + device_key.size();
    if (const auto [end, error] = std::from_chars(first, last, count); error == std::errc() && end == last)
      return count;
  }
  return kEmulatedSmCount;
}

// The heuristic default's id for the exact problem of the best row (decode's
// default split count depends on the sizes and the device), if the runtime
// knows the key.
std::optional<std::string> default_variant_id(const std::vector<tuning_db::MeasurementRow>& rows,
                                              const tuning_db::BestRow& best) {
  const std::optional<ProblemKey> key = best.key;
  const ArchLimits arch = require_arch(kEmulatedArch);
  if (key->op != Op::kDecode) {
    // As the sweep chose it: for fp8 inputs the fp8 feature, compiled for bf16 under fp8 Q, on the
    // portable family unless flash_fwd_sm90 takes them (e4m3 Q, K and V).
    const bool fp8 = is_fp8(key->dtype) || (key->kv_dtype && is_fp8(*key->kv_dtype));
    const bool portable = fp8 && !sm90_takes_fp8(key->dtype, key->kv_dtype.value_or(key->dtype),
                                                 std::max<std::int64_t>(key->head_dim_k, key->head_dim_v));
    Variant v = heuristic_variant(to_string(key->op), is_fp8(key->dtype) ? DType::kBF16 : key->dtype, key->head_dim_k,
                                  key->head_dim_v, arch, key->modifiers, {.portable_only = portable});
    if (fp8) v.modifiers = static_cast<std::uint8_t>(v.modifiers | (kFeatureFp8 & supported_modifiers(*v.kernel)));
    return v.id();
  }
  const auto measured = std::find_if(rows.begin(), rows.end(), [&](const tuning_db::MeasurementRow& m) {
    return m.ok && m.variant_id == best.variant_id;
  });
  if (key->op != Op::kDecode || measured == rows.end()) return std::nullopt;
  const tuning_db::ProblemRecord& r = measured->problem;
  try {
    const AttentionProblem p =
        make_problem(std::vector<std::int64_t>{r.batch, r.seqlen_q, r.heads_q, r.key.head_dim_k},
                     std::vector<std::int64_t>{r.batch, r.seqlen_k, r.heads_kv, r.key.head_dim_k},
                     std::vector<std::int64_t>{r.batch, r.seqlen_k, r.heads_kv, r.key.head_dim_v},
                     {.dtype = key->dtype,
                      .kv_dtype = key->kv_dtype,
                      .mask = key->mask == MaskKind::kCausalBottomRight ? Mask::causal_bottom_right()
                              : key->mask == MaskKind::kCausalTopLeft   ? Mask::causal_top_left()
                                                                        : Mask::none(),
                      // The key's modifiers as a sweep sets them (the choice reads the set, not c).
                      .modifiers = sweep_modifiers(key->modifiers, SweepSpec{}.softcap)});
    const Variant v = with_problem_features(heuristic_decode_variant(p, arch), p);  // an fp8 cache: its loads
    return tuned_id(v, heuristic_splits(p, v, sm_count_of(best.device_key)));
  } catch (const InvalidArgument&) {
    return std::nullopt;  // a record this attune cannot rebuild: no default to compare with
  }
}

// gain_over_default on measurements already read (fastest ok first).
std::optional<double> gain_from(const std::vector<tuning_db::MeasurementRow>& rows, const tuning_db::BestRow& best,
                                const std::optional<std::string>& default_id) {
  if (!default_id || best.median_ms <= 0) return std::nullopt;
  for (const tuning_db::MeasurementRow& m : rows) {
    if (m.ok && m.median_ms && m.variant_id == *default_id) return *m.median_ms / best.median_ms;
  }
  return std::nullopt;
}

}  // namespace

KeyAnalysis analyze_key(const tuning_db::TuningDb& db, const tuning_db::BestRow& row) {
  KeyAnalysis k{.best = row, .rows = db.measurements(row.device_key, row.key), .default_id = std::nullopt};
  k.default_id = default_variant_id(k.rows, row);
  k.gain = gain_from(k.rows, row, k.default_id);
  for (const tuning_db::MeasurementRow& m : k.rows) {
    if (m.ok && m.variant_id == row.variant_id) {
      k.tflops = m.tflops;  // the fastest of the best variant: the best row's measurement
      break;
    }
  }
  if (row.key.op != Op::kDecode) {
    // Kernels compute in bf16 under fp8 Q.
    const DType compute = is_fp8(row.key.dtype) ? DType::kBF16 : row.key.dtype;
    k.predicted_tflops = predicted_tflops(row.device_key, row.variant_id, compute);
  }
  return k;
}

std::optional<double> predicted_tflops(const std::string& device_key, const std::string& variant_id, DType dtype) {
  if (device_key == kEmulatorDeviceKey) return std::nullopt;
  // "name/ccM.m/smN"
  const std::size_t cc = device_key.rfind("/cc");
  const std::size_t sm = device_key.rfind("/sm");
  if (cc == std::string::npos || sm == std::string::npos || sm < cc) return std::nullopt;
  const std::string version = device_key.substr(cc + 3, sm - cc - 3);
  const std::size_t dot = version.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const int major = std::atoi(version.substr(0, dot).c_str());
  const int minor = std::atoi(version.substr(dot + 1).c_str());
  const int sms = std::atoi(device_key.substr(sm + 3).c_str());
  const std::string arch = "sm_" + std::to_string(major * 10 + minor) + (major == 9 && minor == 0 ? "a" : "");
  try {
    const profile::ArchRates rates = profile::arch_rates(arch);
    Variant v = parse_tuned_id(variant_id).variant;
    // The model emulates the 16-bit tile; fp8 loads are the problem's feature.
    v.modifiers = static_cast<std::uint8_t>(v.modifiers & ~kFeatureFp8);
    return profile::bound_of(profile::emulate_per_key_tile(v, dtype), rates, sms > 0 ? sms : rates.sm_count,
                             rates.clock_ghz)
        .tflops;
  } catch (const Error&) {
    return std::nullopt;  // an architecture without rates, or an id this attune does not know
  }
}

std::optional<double> gain_over_default(const tuning_db::TuningDb& db, const tuning_db::BestRow& row) {
  const std::vector<tuning_db::MeasurementRow> rows = db.measurements(row.device_key, row.key);
  return gain_from(rows, row, default_variant_id(rows, row));
}

}  // namespace attune::tuner
