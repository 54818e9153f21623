#include "generator/variants.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "core/error.h"
#include "core/problem.h"
#include "generated/kernel_shapes.h"

namespace attune {

namespace {

struct KnownArch {
  const char* name;
  int compute;
  int max_shared_bytes;
};

// Opt-in dynamic shared memory per block (CUDA programming guide, compute
// capabilities table).
constexpr KnownArch kArchs[] = {
    {"sm_80", 80, 166912},   {"sm_86", 86, 101376},    {"sm_87", 87, 166912},
    {"sm_89", 89, 101376},   {"sm_90", 90, 232448},    {"sm_90a", 90, 232448},
    {"sm_100", 100, 232448}, {"sm_100a", 100, 232448}, {"sm_120", 120, 101376},
};

std::string values_text(std::span<const int> values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i != 0 ? ", " : "") + std::to_string(values[i]);
  return out;
}

void combinations(const KernelSpec& kernel, std::size_t index, std::vector<int>& current,
                  std::vector<std::vector<int>>& out) {
  if (index == kernel.tunables.size()) {
    out.push_back(current);
    return;
  }
  for (int value : kernel.tunables[index].values) {
    current.push_back(value);
    combinations(kernel, index + 1, current, out);
    current.pop_back();
  }
}

constexpr std::string_view kPagedName = "paged";
constexpr std::string_view kFp8Name = "fp8";

// The bit a feature compiles in (its id key is a modifier name, "paged" or "fp8").
std::uint8_t feature_bit(std::string_view feature) {
  if (feature == kPagedName) return kFeaturePaged;
  if (feature == kFp8Name) return kFeatureFp8;
  const std::optional<std::uint8_t> bits = parse_modifier_names(feature);
  if (!bits) {
    throw Error("kernel feature '" + std::string(feature) + "' names no score modifier and is not 'paged' or 'fp8'");
  }
  return *bits;
}

}  // namespace

std::optional<ArchLimits> parse_arch(std::string_view name) {
  for (const KnownArch& a : kArchs) {
    if (name == a.name) return ArchLimits{a.name, a.compute, a.max_shared_bytes, 1024};
  }
  return std::nullopt;
}

ArchLimits require_arch(std::string_view name) {
  if (auto arch = parse_arch(name)) return *arch;
  throw InvalidArgument("architecture: got '" + std::string(name) + "'; expected one of " + known_archs());
}

std::string known_archs() {
  std::string out;
  for (const KnownArch& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::string Variant::id() const {
  std::string out = std::string(kernel->name) + "/";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += (i != 0 ? "." : "") + std::string(kernel->tunables[i].id_key) + std::to_string(values[i]);
  }
  for (std::string_view feature : kernel->features) {
    if ((modifiers & feature_bit(feature)) != 0) out += "." + std::string(feature) + "1";
  }
  return out;
}

std::uint8_t supported_modifiers(const KernelSpec& kernel) {
  std::uint8_t bits = 0;
  for (std::string_view feature : kernel.features) bits = static_cast<std::uint8_t>(bits | feature_bit(feature));
  return bits;
}

std::uint8_t problem_features(const AttentionProblem& p) {
  return static_cast<std::uint8_t>(modifier_bits(p.modifiers) | (p.is_paged() ? kFeaturePaged : 0) |
                                   (p.has_fp8() ? kFeatureFp8 : 0));
}

Variant with_problem_features(Variant v, const AttentionProblem& p) {
  v.modifiers = static_cast<std::uint8_t>(problem_features(p) & supported_modifiers(*v.kernel));
  return v;
}

namespace {

// The largest head-dim bucket of flash_fwd_sm90 (its first tunable), read
// from the registry once.
std::int64_t max_sm90_head_dim() {
  static const std::int64_t kLargest = [] {
    const KernelSpec* spec = find_kernel_spec("flash_fwd_sm90");
    return spec == nullptr ? std::int64_t{0} : std::int64_t{spec->tunables.front().values.back()};
  }();
  return kLargest;
}
constexpr std::int64_t kStrideBytes = 16;  // TMA: global strides are multiples of 16 bytes
// The Hopper fp8 forward: e4m3 Q, K and V in whole 128-byte rows.
constexpr std::int64_t kSm90Fp8MinHeadDim = 65;

}  // namespace

Sm90Fit tma_stride_fit(char tensor, const TensorStrides& s, bool single_batch, int element_bytes) {
  const std::int64_t multiple = kStrideBytes / element_bytes;
  const auto fits = [&](std::int64_t elements) { return elements > 0 && elements % multiple == 0; };
  if (!fits(s.seq)) return {Sm90Fit::Why::kStride, tensor, "row", s.seq, multiple};
  if (!fits(s.head)) return {Sm90Fit::Why::kStride, tensor, "head", s.head, multiple};
  if (!single_batch && !fits(s.batch)) return {Sm90Fit::Why::kStride, tensor, "batch", s.batch, multiple};
  return {};
}

bool sm90_takes_fp8(DType dtype, DType k_dtype, std::int64_t head_dim) {
  return dtype == DType::kE4M3 && k_dtype == DType::kE4M3 && head_dim >= kSm90Fp8MinHeadDim;
}

Sm90Fit sm90_fit(const AttentionProblem& p) {
  if (p.modifiers.scores_modified()) return {Sm90Fit::Why::kModifiers};
  return sm90_backward_fit(p);
}

Sm90Fit sm90_fit_for(Op op, const AttentionProblem& p) {
  if (op == Op::kDecode) return {};
  return op == Op::kBackward ? sm90_backward_fit(p) : sm90_fit(p);
}

// flash_bwd_sm90 compiles softcap and ALiBi in, and sinks change only
// dsink (a kernel of its own).
Sm90Fit sm90_backward_fit(const AttentionProblem& p) {
  // The kernel takes each row's maximum on the raw scores and folds the
  // scale into the exponent: right for a positive scale only.
  // (The default, 1/sqrt(Dk), is: no square root on the dispatch path.)
  if (p.scale && !(*p.scale > 0)) return {Sm90Fit::Why::kScale};
  if (p.is_paged()) return {Sm90Fit::Why::kPaged};
  const std::int64_t d = std::max(p.head_dim_k, p.head_dim_v);
  if (p.has_fp8() && !sm90_takes_fp8(p.dtype, p.k_dtype(), d)) return {Sm90Fit::Why::kFp8};
  if (d > max_sm90_head_dim()) return {Sm90Fit::Why::kHeadDim, 0, nullptr, d};
  const bool single_k = p.has_packed_keys() || p.batch <= 1;
  const int bytes = element_bytes(p.dtype);
  Sm90Fit fit = tma_stride_fit('Q', p.q_strides, p.is_packed() || p.batch <= 1, bytes);
  // Without keys the kernel loads no K or V tile: their maps are never built.
  if (fit.fits() && p.seqlen_k > 0) fit = tma_stride_fit('K', p.k_strides, single_k, bytes);
  if (fit.fits() && p.seqlen_k > 0) fit = tma_stride_fit('V', p.v_strides, single_k, bytes);
  return fit;
}

std::string Sm90Fit::reason(const AttentionProblem& p) const {
  switch (why) {
    case Why::kFits:
      return {};
    case Why::kModifiers:
      return "score modifiers (" + modifier_names(modifier_bits(p.modifiers) & kModAll) + ")";
    case Why::kScale: {
      std::ostringstream scale;
      scale << p.softmax_scale();
      return "softmax scale " + scale.str() +
             ": the Hopper kernel takes the row maximum on unscaled scores and needs a scale above 0";
    }
    case Why::kPaged:
      return "a paged KV cache";
    case Why::kFp8:
      return "fp8 inputs (" + storage_name(p.dtype, p.kv_dtype) + ", head dim " +
             std::to_string(std::max(p.head_dim_k, p.head_dim_v)) +
             "): the Hopper kernel takes e4m3 Q, K and V at head dims " + std::to_string(kSm90Fp8MinHeadDim) + " to " +
             std::to_string(max_sm90_head_dim()) + "; the portable kernels widen the rest as they load";
    case Why::kHeadDim:
      return "head dim " + std::to_string(value) + " above " + std::to_string(max_sm90_head_dim());
    case Why::kStride:
      return std::string(1, tensor) + " " + stride + " stride " + std::to_string(value) +
             " elements: TMA needs a positive multiple of " + std::to_string(multiple);
  }
  return {};
}

std::string sm90_unfit_reason(const AttentionProblem& problem) { return sm90_fit(problem).reason(problem); }

std::string feature_names(std::uint8_t bits) {
  const std::uint8_t mods = bits & kModKnown;
  std::string names = mods != 0 || (bits & (kFeaturePaged | kFeatureFp8)) == 0 ? modifier_names(mods) : "";
  for (const auto& [bit, name] : {std::pair{kFeaturePaged, kPagedName}, std::pair{kFeatureFp8, kFp8Name}}) {
    if ((bits & bit) != 0) names += (names.empty() ? "" : "+") + std::string(name);
  }
  return names;
}

void check_variant_modifiers(const Variant& v, std::uint8_t problem_modifiers) {
  // Every call checks: the common case (a variant with exactly the problem's
  // modifiers, a subset of its kernel's) returns before reading the features.
  if (v.modifiers == problem_modifiers) return;
  const std::uint8_t wanted = problem_modifiers & supported_modifiers(*v.kernel);
  if (v.modifiers == wanted) return;
  const std::uint8_t missing = wanted & static_cast<std::uint8_t>(~v.modifiers);
  const std::uint8_t extra = v.modifiers & static_cast<std::uint8_t>(~wanted);
  std::string what = "variant " + v.id() + ": ";
  if (missing != 0) what += "compiled without " + feature_names(missing) + ", which the problem uses";
  if (extra != 0)
    what += std::string(missing != 0 ? "; " : "") + "compiled with " + feature_names(extra) +
            ", which the problem does not use";
  throw InvalidArgument(what + "; expected a variant with features " + feature_names(wanted) +
                        " (as 'attune variants list' prints for the problem)");
}

void require_kernel(const Variant& variant, KernelId id) {
  if (variant.kernel == nullptr || variant.kernel->id != id) {
    throw InvalidArgument("variant " + (variant.kernel == nullptr ? std::string("(none)") : variant.id()) +
                          ": expected a " + std::string(kernel_spec(id).name) + " variant");
  }
}

Variant only_variant(KernelId id, std::uint8_t modifiers) {
  const KernelSpec& spec = kernel_spec(id);
  Variant v{&spec, {}, static_cast<std::uint8_t>(modifiers & supported_modifiers(spec))};
  for (const TunableSpec& t : spec.tunables) v.values.push_back(t.values.front());
  return v;
}

std::string Variant::name_expression(DType dtype) const {
  std::string features;
  for (std::string_view feature : kernel->features) features += (modifiers & feature_bit(feature)) != 0 ? ", 1" : ", 0";
  return std::string(kernel->qualified_name) + "<" + values_text(values) + ", " +
         (dtype == DType::kF16 ? "attune::Fp16" : "attune::Bf16") + features + ">";
}

const KernelSpec& kernel_for_op(std::string_view op) {
  if (op == "fwd") {
    if (const KernelSpec* k = find_kernel_spec("flash_fwd")) return *k;
  }
  if (op == "decode") {
    if (const KernelSpec* k = find_kernel_spec("flash_decode")) return *k;
  }
  if (op == "bwd") {
    if (const KernelSpec* k = find_kernel_spec("flash_bwd")) return *k;
  }
  throw InvalidArgument("--op: got '" + std::string(op) + "'; expected fwd, decode or bwd");
}

std::vector<const KernelSpec*> kernels_for_op(std::string_view op) {
  std::vector<const KernelSpec*> out = {&kernel_for_op(op)};
  if (op == "fwd") {
    if (const KernelSpec* k = find_kernel_spec("flash_fwd_sm90")) out.push_back(k);
  }
  if (op == "bwd") {
    if (const KernelSpec* k = find_kernel_spec("flash_bwd_sm90")) out.push_back(k);
  }
  return out;
}

std::string_view op_of(const KernelSpec& kernel) {
  for (std::string_view op : {"fwd", "decode", "bwd"}) {
    for (const KernelSpec* k : kernels_for_op(op)) {
      if (k == &kernel) return op;
    }
  }
  return {};
}

bool kernel_runs_on(const KernelSpec& kernel, const ArchLimits& arch) {
  return arch.every_arch || kernel.archs.empty() ||
         std::find(kernel.archs.begin(), kernel.archs.end(), arch.name) != kernel.archs.end();
}

int head_dim_bucket(const KernelSpec& kernel, int dk, int dv) {
  const int need = std::max(dk, dv);
  for (int value : kernel.tunables.front().values) {
    if (value >= need) return value;
  }
  throw InvalidArgument("head dim: got max(Dk, Dv) = " + std::to_string(need) + "; expected at most " +
                        std::to_string(kernel.tunables.front().values.back()) + " for " + std::string(kernel.name));
}

void check_variant_fits(const Variant& v, int dk, int dv, const ArchLimits& arch) {
  if (!kernel_runs_on(*v.kernel, arch)) {
    std::string archs;
    for (std::string_view a : v.kernel->archs) archs += (archs.empty() ? "" : ", ") + std::string(a);
    throw InvalidArgument("variant " + v.id() + ": " + std::string(v.kernel->name) + " compiles only for " + archs +
                          "; this is " + arch.name + " (expected a variant 'attune variants list --arch " + arch.name +
                          "' prints)");
  }
  if (v.values.front() < std::max(dk, dv)) {
    throw InvalidArgument("variant " + v.id() + ": head-dim bucket " + std::to_string(v.values.front()) +
                          " is below max(Dk, Dv) = " + std::to_string(std::max(dk, dv)) +
                          "; expected a variant of bucket " + std::to_string(head_dim_bucket(*v.kernel, dk, dv)));
  }
  if (v.shared_bytes() > arch.max_shared_bytes) {
    throw InvalidArgument("variant " + v.id() + ": needs " + std::to_string(v.shared_bytes()) +
                          " bytes of shared memory; " + arch.name + " allows " + std::to_string(arch.max_shared_bytes));
  }
  if (v.threads() > arch.max_threads) {
    throw InvalidArgument("variant " + v.id() + ": " + std::to_string(v.threads()) + " threads per block; " +
                          arch.name + " allows " + std::to_string(arch.max_threads));
  }
}

std::vector<Variant> enumerate_variants(std::string_view op, DType /*dtype*/, int dk, int dv, const ArchLimits& arch,
                                        std::uint8_t modifiers) {
  std::vector<Variant> out;
  // The backward's main kernels never read the sinks: their gradient is a
  // kernel of its own (flash_bwd_dsink).
  const auto wanted = static_cast<std::uint8_t>(op == "bwd" ? modifiers & ~kModSinks : modifiers);
  for (const KernelSpec* kernel : kernels_for_op(op)) {
    const bool portable = kernel == &kernel_for_op(op);
    const auto bits = static_cast<std::uint8_t>(modifiers & supported_modifiers(*kernel));
    // The portable family answers for every problem (and says why not in
    // its errors); the others only where they fit.
    if (!portable) {
      const int need = std::max(dk, dv);
      if (!kernel_runs_on(*kernel, arch) || bits != wanted || kernel->tunables.front().values.back() < need) {
        continue;
      }
      // The Hopper fp8 forward reads whole 128-byte rows of e4m3 columns.
      if (kernel->id == KernelId::kFlashFwdSm90 && (bits & kFeatureFp8) != 0 && need < kSm90Fp8MinHeadDim) continue;
    }
    std::vector<int> current = {head_dim_bucket(*kernel, dk, dv)};
    std::vector<std::vector<int>> all;
    combinations(*kernel, 1, current, all);
    for (auto& values : all) {
      if (!kernel->valid(values)) continue;
      Variant v{kernel, std::move(values), bits};
      if (v.shared_bytes() <= arch.max_shared_bytes && v.threads() <= arch.max_threads) out.push_back(std::move(v));
    }
  }
  return out;
}

Variant parse_variant_id(std::string_view id) {
  const auto bad = [&](const std::string& what, const std::string& expected) -> InvalidArgument {
    return InvalidArgument("variant id '" + std::string(id) + "': " + what + "; expected " + expected);
  };
  const std::size_t slash = id.find('/');
  if (slash == std::string_view::npos)
    throw bad("no '/'", "KERNEL/KEYVALUE.KEYVALUE..., e.g. flash_fwd/d64.bm64.bn64.wm4.wn1.st2");
  const KernelSpec* kernel = find_kernel_spec(id.substr(0, slash));
  if (kernel == nullptr) throw bad("unknown kernel '" + std::string(id.substr(0, slash)) + "'", "flash_fwd");
  Variant v{kernel, {}};
  std::string_view rest = id.substr(slash + 1);
  for (const TunableSpec& t : kernel->tunables) {
    const std::size_t dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    std::string expected = std::string(t.id_key) + " followed by one of {" + values_text(t.values) + "}";
    if (part.empty()) throw bad("missing " + std::string(t.id_key), expected);
    if (part.substr(0, t.id_key.size()) != t.id_key) throw bad("'" + std::string(part) + "'", expected);
    int value = 0;
    const std::string_view digits = part.substr(t.id_key.size());
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size() ||
        std::find(t.values.begin(), t.values.end(), value) == t.values.end()) {
      throw bad("'" + std::string(part) + "'", expected);
    }
    v.values.push_back(value);
    rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
  }
  // Then the modifiers compiled in, in the kernel's order, each optional.
  for (std::string_view feature : kernel->features) {
    const std::size_t dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    if (part.substr(0, feature.size()) != feature) continue;
    const std::string_view digit = part.substr(feature.size());
    if (digit != "0" && digit != "1")
      throw bad("'" + std::string(part) + "'", std::string(feature) + "0 or " + std::string(feature) + "1");
    if (digit == "1") v.modifiers = static_cast<std::uint8_t>(v.modifiers | feature_bit(feature));
    rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
  }
  if (!rest.empty()) {
    std::string features;
    for (std::string_view f : kernel->features) features += (features.empty() ? "" : ", ") + std::string(f) + "1";
    throw bad("trailing '" + std::string(rest) + "'",
              "exactly " + std::to_string(kernel->tunables.size()) + " tunables" +
                  (features.empty() ? std::string() : ", then optional modifiers in this order: " + features));
  }
  if (!kernel->valid(v.values)) {
    throw bad("these tunables break the template's constraints", "an id that 'attune variants list' prints");
  }
  return v;
}

Variant nearest_variant(const std::vector<Variant>& candidates, const std::vector<int>& wanted) {
  const auto distance = [&](const Variant& v) {
    int d = 0;
    for (std::size_t i = 0; i < v.values.size() && i < wanted.size(); ++i) d += v.values[i] == wanted[i] ? 0 : 1;
    return d;
  };
  return *std::min_element(candidates.begin(), candidates.end(),
                           [&](const Variant& a, const Variant& b) { return distance(a) < distance(b); });
}

Variant flash_attention2_backward(const std::vector<Variant>& candidates, bool deterministic) {
  const int bucket = FlashBwdShape::of(candidates.front()).head_dim;
  const bool wide = bucket > 128;
  const FlashBwdShape wanted{.head_dim = bucket,
                             .block_m = 64,
                             .block_n = wide ? 32 : 64,
                             .warps_m = wide ? 4 : 2,
                             .warps_n = wide ? 2 : 4,
                             .stages = 2,
                             .dq_atomic = deterministic ? 0 : 1};
  return nearest_variant(candidates, wanted.values());
}

Variant flash_attention2_forward(const std::vector<Variant>& candidates) {
  const int bucket = FlashFwdShape::of(candidates.front()).head_dim;
  const FlashFwdShape wanted{.head_dim = bucket,
                             .block_m = 64,
                             .block_n = bucket <= 64 ? 64 : 32,
                             .warps_m = 4,
                             .warps_n = 1,
                             .stages = 2,
                             .q_regs = 1};
  return nearest_variant(candidates, wanted.values());
}

}  // namespace attune
