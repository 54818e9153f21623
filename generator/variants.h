// The variant space: which instantiations of a kernel are valid for a problem
// class on an architecture, and their canonical ids.
//
//   auto arch = attune::parse_arch("sm_90a");
//   for (const attune::Variant& v : attune::enumerate_variants("fwd", attune::DType::kBF16, 128, 128, *arch))
//     std::cout << v.id() << '\n';   // flash_fwd/d128.bm64.bn32.wm2.wn1.st1 ...
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/problem.h"
#include "core/problem_key.h"
#include "generator/kernel_registry.h"

namespace attune {

// The limits that prune variants on one GPU architecture.
struct ArchLimits {
  std::string name;          // sm_90a
  int compute = 0;           // 90
  int max_shared_bytes = 0;  // dynamic shared memory per block, opt-in maximum
  int max_threads = 1024;
  bool every_arch = false;  // runs every kernel whatever its architecture (the emulator)
};

// "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120", ...
std::optional<ArchLimits> parse_arch(std::string_view name);
// parse_arch, or InvalidArgument naming the known architectures.
ArchLimits require_arch(std::string_view name);
// The names parse_arch knows, for error messages.
std::string known_archs();

// A kernel feature that is not a score modifier: flash_fwd's read of a
// paged KV cache through its block table ("paged"), compiled in only for
// problems with a paged cache. Its bit lives beside the modifiers' bits.
inline constexpr std::uint8_t kFeaturePaged = 0x10;
// Likewise fp8 inputs ("fp8": an fp8 KV cache, or fp8 Q, K and V), widened
// to the kernel's 16-bit dtype as they load (templates/flash_tile.cuh).
inline constexpr std::uint8_t kFeatureFp8 = 0x20;

struct Variant {
  const KernelSpec* kernel = nullptr;
  std::vector<int> values;  // one per tunable, in the template's order
  // Features compiled in: score modifiers (kModSoftcap | kModSinks |
  // kModAlibi) and kFeaturePaged, a subset of the kernel's features:
  // chosen by the problem, never tuned.
  std::uint8_t modifiers = 0;

  // Canonical id, e.g. flash_fwd/d128.bm64.bn64.wm4.wn1.st2, then each
  // feature compiled in (.softcap1.sinks1.alibi1.paged1): the key of the
  // variant in caches, the tuning database and the CLI.
  std::string id() const;
  // The expression NVRTC instantiates, e.g. attune::flash_fwd<128, ..., attune::Bf16, 0, 0, 0, 0>.
  std::string name_expression(DType dtype) const;
  // Tunables by name: the kernel's generated shape (generated/kernel_shapes.h),
  // e.g. FlashFwdShape::of(variant).block_m.
  int threads() const { return kernel->threads(values); }
  int shared_bytes() const { return kernel->shared_bytes(values); }
  bool operator==(const Variant& other) const {
    return kernel == other.kernel && values == other.values && modifiers == other.modifiers;
  }
};

// Throws InvalidArgument unless `variant` is a variant of kernel `id`
// ("variant flash_decode/...: expected a flash_fwd variant").
void require_kernel(const Variant& variant, KernelId id);

// The one variant of a kernel whose tunables each have one value (the
// decode combine, the backward's row kernels), with the modifiers of
// `modifiers` that the kernel supports.
Variant only_variant(KernelId id, std::uint8_t modifiers = 0);

// The features (bits) a kernel can compile in.
std::uint8_t supported_modifiers(const KernelSpec& kernel);

// The features (bits) a problem needs: its score modifiers, and
// kFeaturePaged for a paged cache.
std::uint8_t problem_features(const AttentionProblem& problem);
// `variant` compiled with exactly the features of `problem` its kernel
// supports: a tuned or heuristic tile choice, made for the problem class,
// for this problem (a paged cache adds "paged" to a forward variant).
Variant with_problem_features(Variant variant, const AttentionProblem& problem);
// "softcap+sinks", "paged", "softcap+paged", "none".
std::string feature_names(std::uint8_t bits);

// The portable kernel of an operation, which every architecture runs:
// "fwd" -> flash_fwd. Throws InvalidArgument.
const KernelSpec& kernel_for_op(std::string_view op);
// Every kernel family of an operation, the portable one first ("fwd" ->
// flash_fwd, flash_fwd_sm90). Throws InvalidArgument.
std::vector<const KernelSpec*> kernels_for_op(std::string_view op);
// The operation a kernel serves ("fwd" for flash_fwd and flash_fwd_sm90;
// empty for the helper kernels).
std::string_view op_of(const KernelSpec& kernel);
// Whether the kernel compiles for `arch` (its Tunables::kArchs).
bool kernel_runs_on(const KernelSpec& kernel, const ArchLimits& arch);

// Smallest value of the kernel's first tunable (its head-dim bucket) that
// holds max(dk, dv). Throws InvalidArgument when none does.
int head_dim_bucket(const KernelSpec& kernel, int dk, int dv);

// Every valid variant for the problem class on `arch`, in a stable order
// (family by family, as kernels_for_op lists them), each with the problem's
// modifiers (bits) that its kernel supports. A family that runs on other
// architectures, has no head-dim bucket for the problem or cannot compile
// the modifiers in is left out.
std::vector<Variant> enumerate_variants(std::string_view op, DType dtype, int dk, int dv, const ArchLimits& arch,
                                        std::uint8_t modifiers = 0);

// Parses and validates an id against the kernel's tunable domains and
// constraints. Throws InvalidArgument saying what is wrong.
Variant parse_variant_id(std::string_view id);

// Checks that `variant` can run a problem with these head dims on `arch`
// (bucket, shared memory, threads). Throws InvalidArgument.
// check_variant_modifiers: and that it compiles in exactly the problem's
// features (problem_features) its kernel supports ("variant ...: compiled
// without softcap, which the problem uses; ...").
void check_variant_modifiers(const Variant& variant, std::uint8_t problem_modifiers);
void check_variant_fits(const Variant& variant, int dk, int dv, const ArchLimits& arch);

// Whether a problem fits flash_fwd_sm90, the Hopper forward kernel family:
// its tensors must be ones TMA can describe and its features ones the family
// compiles. Dispatch asks on every call (so the answer allocates nothing);
// the launch asks again with the call's pointers.
// What keeps a problem off flash_fwd_sm90, and the one value that says why.
struct Sm90Fit {
  enum class Why : std::uint8_t { kFits, kModifiers, kScale, kPaged, kFp8, kHeadDim, kStride };
  Why why = Why::kFits;
  char tensor = 0;               // kStride: 'Q', 'K', 'V' or 'O'
  const char* stride = nullptr;  // kStride: "row", "head" or "batch"
  std::int64_t value = 0;        // kHeadDim: the head dim; kStride: the stride in elements
  std::int64_t multiple = 0;     // kStride: what TMA needs it a multiple of, in elements (16 bytes)

  bool fits() const { return why == Why::kFits; }
  // "score modifiers (softcap)", "softmax scale -0.5: ...", "a paged KV cache", "head dim 320 above
  // 256", "K row stride 100 elements: TMA needs a positive multiple of 8";
  // empty when it fits.
  std::string reason(const AttentionProblem& problem) const;
};

// The fit whatever the call's pointers. O needs no tensor map: without one
// it leaves by direct stores, so O's strides are not asked here.
Sm90Fit sm90_fit(const AttentionProblem& problem);
// The same for flash_bwd_sm90, which takes the score modifiers.
Sm90Fit sm90_backward_fit(const AttentionProblem& problem);
// The fit of the operation's Hopper family: sm90_fit for the forward,
// sm90_backward_fit for the backward; decode has none (always fits).
Sm90Fit sm90_fit_for(Op op, const AttentionProblem& problem);
// Whether TMA can describe one [batch, rows, heads, D] tensor of
// `element_bytes` elements (2, or 1 for fp8) with these strides (each a
// multiple of 16 bytes); `single_batch` (packed, or a batch of one): the
// batch stride is never stepped.
Sm90Fit tma_stride_fit(char tensor, const TensorStrides& strides, bool single_batch, int element_bytes = 2);

// Whether flash_fwd_sm90 takes fp8 inputs of these storage types at head
// dim max(Dk, Dv): e4m3 Q, K and V (FlashAttention-3's fp8 forward) in
// whole 128-byte rows, d > 64. e5m2, an fp8 cache under 16-bit queries and
// d <= 64 run on the portable kernels, which widen fp8 as they load.
bool sm90_takes_fp8(DType dtype, DType k_dtype, std::int64_t head_dim);

// sm90_fit(problem).reason(problem).
std::string sm90_unfit_reason(const AttentionProblem& problem);

// The candidate whose tunable values differ from `wanted` in the fewest
// places (the first such in the list); candidates must not be empty.
Variant nearest_variant(const std::vector<Variant>& candidates, const std::vector<int>& wanted);

// FlashAttention-2's usual forward shape, the portable family's default: 4
// warps of 16 query rows each, one warp per row block, a 2-deep pipeline, Q
// kept in registers, 64-key tiles at head dims up to 64 and 32 above. Of
// `candidates` (flash_fwd variants of one head-dim bucket, not empty), the
// nearest to it.
Variant flash_attention2_forward(const std::vector<Variant>& candidates);
// The flash_bwd variant of `candidates` (flash_bwd variants of one head-dim
// bucket) nearest FlashAttention-2's backward tiles: 64 query rows against
// 64 keys on 2 x 4 warps (32 keys on 4 x 2 warps from head dim 160 on,
// where dK and dV fill the registers), two Q / dO tiles in flight; dQ by
// atomics unless `deterministic` (then summed per key block in order).
Variant flash_attention2_backward(const std::vector<Variant>& candidates, bool deterministic);

}  // namespace attune
