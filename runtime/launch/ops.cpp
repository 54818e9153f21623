#include "runtime/launch/ops.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "generated/kernel_shapes.h"
#include "runtime/launch/flash_bwd_params.h"
#include "runtime/launch/flash_bwd_sm90_params.h"
#include "runtime/launch/flash_decode_params.h"
#include "runtime/launch/flash_fwd_params.h"
#include "runtime/launch/flash_fwd_sm90_params.h"
#include "runtime/launch/kv_append_params.h"
#include "runtime/launch/merge_states_params.h"

namespace attune {

namespace {

std::size_t bytes(std::int64_t elements, std::size_t size) { return static_cast<std::size_t>(elements) * size; }

// The index arrays a call's kernels read, as the emulator checks them.
void describe_metadata(LaunchBackend::Call& call, const AttentionProblem& p, const DeviceMetadata& m) {
  const auto ints = [&](const char* name, const std::int32_t* data, bool used, std::int64_t count) {
    if (used && data != nullptr && count > 0)
      call.buffer(name, data, static_cast<std::size_t>(count) * sizeof(std::int32_t));
  };
  ints("cu_seqlens_q", m.cu_seqlens_q, p.is_packed(), p.batch + 1);
  ints("cu_seqlens_k", m.cu_seqlens_k, p.has_packed_keys(), p.batch + 1);
  ints("seqlens_k", m.seqlens_k, p.has_seqlens_k(), p.batch);
  ints("block_table", m.block_table, p.is_paged(), p.batch * p.max_pages());
}

void describe(LaunchBackend::Call& call, const char* name, const void* data, std::int64_t elements, std::size_t size) {
  if (data != nullptr && elements > 0) call.buffer(name, data, bytes(elements, size));
}

// The modifiers' tensors the problem uses, and dropout's {seed, offset}.
void describe_modifiers(LaunchBackend::Call& call, const AttentionProblem& p, const float* sinks,
                        const float* alibi_slopes, const std::uint64_t* rng_state) {
  if (p.modifiers.sinks) describe(call, "sinks", sinks, p.heads_q, sizeof(float));
  describe(call, "alibi_slopes", alibi_slopes, alibi_extent(p), sizeof(float));
  if (p.modifiers.dropout()) describe(call, "rng_state", rng_state, 2, sizeof(std::uint64_t));
}

// Q, K, V, O and LSE of a forward or decode call, and its modifiers.
void describe_attention(LaunchBackend::Call& call, const AttentionProblem& p, const AttentionBuffers& b) {
  const auto kv_bytes = static_cast<std::size_t>(element_bytes(p.k_dtype()));
  describe(call, "Q", b.q, q_extent(p), static_cast<std::size_t>(element_bytes(p.dtype)));
  describe(call, "K", b.k, k_extent(p), kv_bytes);
  describe(call, "V", b.v, v_extent(p), kv_bytes);
  describe(call, "O", b.o, o_extent(p), static_cast<std::size_t>(element_bytes(p.compute_dtype())));
  describe(call, "LSE", b.lse, lse_extent(p), sizeof(float));
  describe_modifiers(call, p, b.sinks, b.alibi_slopes, b.rng_state);
  // fp8 descales: the largest [b, kv_head] index read, plus one.
  const DescaleStrides& d = p.descale_strides;
  const std::int64_t descales = (std::max<std::int64_t>(p.batch, 1) - 1) * d.batch + (p.heads_kv - 1) * d.head + 1;
  describe(call, "q_descale", b.q_descale, descales, sizeof(float));
  describe(call, "k_descale", b.k_descale, descales, sizeof(float));
  describe(call, "v_descale", b.v_descale, descales, sizeof(float));
}

template <class Params>
void launch(LaunchBackend::Call& call, const LoadedKernel& kernel, const LaunchConfig& config, const Params& params) {
  call.launch(kernel, config, &params, sizeof(params));
}

}  // namespace

// The flash_fwd variant that runs a call flash_fwd_sm90 cannot map (a
// tensor off 16-byte alignment): FlashAttention-2's usual shape at the same
// head-dim bucket, or the valid variant nearest it.
Variant portable_forward_variant(const Variant& sm90) {
  const int bucket = FlashFwdSm90Shape::of(sm90).head_dim;
  return flash_attention2_forward(enumerate_variants("fwd", DType::kBF16, bucket, bucket, require_arch("sm_80")));
}

ForwardKernels load_forward(LaunchBackend& backend, const Variant& variant, DType dtype, Compile compile) {
  if (variant.kernel != nullptr && variant.kernel->id == KernelId::kFlashFwdSm90) {
    ForwardKernels k{backend.load(variant, dtype, compile),
                     [&backend, portable = portable_forward_variant(variant), dtype, compile] {
                       return backend.load(portable, dtype, compile);
                     },
                     backend.sm_count(),
                     {}};
    if (FlashFwdSm90Shape::of(variant).scheduler == sm90_sched::kVarlen) {
      k.varlen_tiles = backend.load(sm90_varlen_tiles_variant(), dtype, compile);
    }
    return k;
  }
  require_kernel(variant, KernelId::kFlashFwd);
  return {backend.load(variant, dtype, compile), {}, backend.sm_count()};
}

DecodeKernels load_decode(LaunchBackend& backend, const Variant& variant, int splits, DType dtype, Compile compile,
                          int split_tiles) {
  require_kernel(variant, KernelId::kFlashDecode);
  check_splits(splits);
  if (split_tiles < 0) throw InvalidArgument("split tiles: got " + std::to_string(split_tiles) + "; expected >= 0");
  DecodeKernels k{backend.load(variant, dtype, compile), {}, splits, split_tiles};
  if (splits > 1) k.combine = backend.load(decode_combine_variant(variant.modifiers), dtype, compile);
  return k;
}

// The flash_bwd variant that runs a call flash_bwd_sm90 cannot map:
// FlashAttention-2's usual shape at the same head-dim bucket, dQ by atomics
// (the workspace flash_bwd_sm90's call was sized for).
Variant portable_backward_variant(const Variant& sm90) {
  const int bucket = FlashBwdSm90Shape::of(sm90).head_dim;
  return flash_attention2_backward(
      enumerate_variants("bwd", DType::kBF16, bucket, bucket, require_arch("sm_80"), sm90.modifiers), false);
}

BackwardKernels load_backward(LaunchBackend& backend, const Variant& variant, DType dtype, bool sinks,
                              Compile compile) {
  const bool hopper = variant.kernel != nullptr && variant.kernel->id == KernelId::kFlashBwdSm90;
  if (!hopper) require_kernel(variant, KernelId::kFlashBwd);
  BackwardKernels k{backend.load(bwd_preprocess_variant(), dtype, compile),
                    backend.load(variant, dtype, compile),
                    backend.load(bwd_dq_convert_variant(), dtype, compile),
                    {},
                    {}};
  if (sinks) k.dsink = backend.load(bwd_dsink_variant(), dtype, compile);
  k.sm_count = backend.sm_count();
  if (hopper) {
    k.fallback = [&backend, portable = portable_backward_variant(variant), dtype, compile] {
      return backend.load(portable, dtype, compile);
    };
  }
  return k;
}

std::size_t forward_workspace_bytes(const AttentionProblem& problem, const ForwardKernels& kernels) {
  return flash_fwd_sm90_workspace_bytes(kernels.main.variant, problem);
}

std::size_t decode_workspace_bytes(const AttentionProblem& problem, const DecodeKernels& kernels) {
  return bytes(decode_workspace_floats(problem, kernels.splits), sizeof(float));
}

std::size_t backward_workspace_bytes(const AttentionProblem& problem, const BackwardKernels& kernels) {
  return bytes(backward_workspace(problem, kernels.main.variant).total_floats(), sizeof(float));
}

void launch_forward(LaunchBackend::Call& call, const AttentionProblem& p, const ForwardKernels& kernels,
                    const AttentionBuffers& b, const DeviceMetadata& metadata, void* workspace) {
  check_variant_modifiers(kernels.main.variant, problem_features(p));
  if (p.batch == 0 || p.max_seqlen_q() == 0) return;
  describe_attention(call, p, b);
  describe_metadata(call, p, metadata);
  const Variant& main = kernels.main.variant;
  if (main.kernel->id == KernelId::kFlashFwdSm90) {
    const std::string unfit = sm90_unfit_reason(p, b);
    if (unfit.empty()) {
      const auto encode = [&](const TensorMapSpec& spec) { return call.tensor_map(spec); };
      const std::size_t scheduler_bytes = flash_fwd_sm90_workspace_bytes(main, p);
      if (scheduler_bytes > 0) {
        describe(call, "tile scheduler", workspace, static_cast<std::int64_t>(scheduler_bytes), 1);
        // Every launch starts from tile 0.
        call.zero(workspace, sm90_sched::VarlenLayout::counter_bytes() / sizeof(std::int32_t));
      }
      const FlashFwdSm90Params params = flash_fwd_sm90_params(p, b, metadata, main, workspace, encode);
      if (FlashFwdSm90Shape::of(main).scheduler == sm90_sched::kVarlen) {
        if (kernels.varlen_tiles.variant.kernel == nullptr) {
          throw InvalidArgument("variant " + main.id() +
                                ": the varlen scheduler needs sm90_varlen_tiles; expected kernels loaded with "
                                "load_forward");
        }
        launch(call, kernels.varlen_tiles, sm90_varlen_tiles_launch(), sm90_varlen_tiles_params(params, main));
      }
      launch(call, kernels.main, flash_fwd_sm90_launch(params, main, kernels.sm_count), params);
      return;
    }
    if (!kernels.fallback) {
      throw InvalidArgument("variant " + main.id() + ": cannot run this call (" + unfit +
                            "); expected a flash_fwd variant, or kernels loaded with load_forward");
    }
    const LoadedKernel fallback = kernels.fallback();
    launch(call, fallback, flash_fwd_launch(p, fallback.variant), flash_fwd_params(p, b, metadata));
    return;
  }
  launch(call, kernels.main, flash_fwd_launch(p, main), flash_fwd_params(p, b, metadata));
}

void launch_decode(LaunchBackend::Call& call, const AttentionProblem& p, const DecodeKernels& kernels,
                   const AttentionBuffers& b, const DeviceMetadata& metadata, float* workspace) {
  check_variant_modifiers(kernels.main.variant, problem_features(p));
  if (p.batch == 0 || p.seqlen_q == 0) return;
  describe_attention(call, p, b);
  describe_metadata(call, p, metadata);
  describe(call, "split workspace", workspace, decode_workspace_floats(p, kernels.splits), sizeof(float));
  launch(call, kernels.main, flash_decode_launch(p, kernels.main.variant, kernels.splits),
         flash_decode_params(p, b, metadata, kernels.splits, workspace, kernels.split_tiles));
  if (kernels.splits > 1) {
    launch(call, kernels.combine, flash_decode_combine_launch(p),
           flash_decode_combine_params(p, b, metadata, kernels.splits, workspace));
  }
}

void launch_backward(LaunchBackend::Call& call, const AttentionProblem& p, const BackwardKernels& kernels,
                     const BackwardBuffers& b, const DeviceMetadata& metadata, float* workspace) {
  if (p.is_paged()) throw InvalidArgument("backward: a paged KV cache; expected contiguous K and V");
  check_variant_modifiers(kernels.main.variant, modifier_bits(p.modifiers));
  if (p.modifiers.sinks && kernels.dsink.variant.kernel == nullptr) {
    throw InvalidArgument(
        "backward with sinks: kernels loaded without the dsink reduction; expected load_backward "
        "with sinks");
  }
  if (p.batch == 0) return;
  describe(call, "Q", b.q, q_extent(p), 2);
  describe(call, "K", b.k, k_extent(p), 2);
  describe(call, "V", b.v, v_extent(p), 2);
  describe(call, "O", b.o, o_extent(p), 2);
  describe(call, "dO", b.d_o, o_extent(p), 2);
  describe(call, "LSE", b.lse, lse_extent(p), sizeof(float));
  describe(call, "dQ", b.dq, q_extent(p), 2);
  describe(call, "dK", b.dk, k_extent(p), 2);
  describe(call, "dV", b.dv, v_extent(p), 2);
  describe_modifiers(call, p, b.sinks, b.alibi_slopes, b.rng_state);
  if (p.modifiers.sinks) describe(call, "dsink", b.dsink, p.heads_q, sizeof(float));
  describe_metadata(call, p, metadata);
  const Variant& main = kernels.main.variant;
  const BackwardWorkspace sizes = backward_workspace(p, main);
  describe(call, "backward workspace", workspace, sizes.total_floats(), sizeof(float));
  const FlashBwdParams params = flash_bwd_params(p, b, metadata, main, split_workspace(sizes, workspace));
  launch(call, kernels.preprocess, flash_bwd_row_launch(p, kernels.preprocess.variant), params);
  if (main.kernel->id == KernelId::kFlashBwdSm90) {
    const std::string unfit = bwd_sm90_unfit_reason(p, b);
    if (unfit.empty()) {
      const auto encode = [&](const TensorMapSpec& spec) { return call.tensor_map(spec); };
      const FlashBwdSm90Params sm90 = flash_bwd_sm90_params(p, b, params, main, encode);
      launch(call, kernels.main, flash_bwd_sm90_launch(p, sm90.tiles, main, kernels.sm_count), sm90);
    } else if (kernels.fallback) {
      const LoadedKernel fallback = kernels.fallback();
      launch(call, fallback, flash_bwd_launch(p, fallback.variant, kernels.sm_count), params);
    } else {
      throw InvalidArgument("variant " + main.id() + ": cannot run this call (" + unfit +
                            "); expected a flash_bwd variant, or kernels loaded with load_backward");
    }
  } else {
    launch(call, kernels.main, flash_bwd_launch(p, main, kernels.sm_count), params);
  }
  launch(call, kernels.convert, flash_bwd_row_launch(p, kernels.convert.variant), params);
  if (p.modifiers.sinks) launch(call, kernels.dsink, flash_bwd_dsink_launch(p), params);
}

void launch_merge(LaunchBackend::Call& call, const MergeProblem& p, const LoadedKernel& kernel,
                  std::span<const void* const> o, std::span<const float* const> lse, void* out_o, float* out_lse) {
  require_kernel(kernel.variant, KernelId::kMergeStates);
  if (p.rows == 0) return;
  // The emulator keeps the names: one per part.
  static constexpr const char* kO[kMaxMergeParts] = {"O 0", "O 1", "O 2",  "O 3",  "O 4",  "O 5",  "O 6",  "O 7",
                                                     "O 8", "O 9", "O 10", "O 11", "O 12", "O 13", "O 14", "O 15"};
  static constexpr const char* kLse[kMaxMergeParts] = {"LSE 0",  "LSE 1",  "LSE 2",  "LSE 3", "LSE 4",  "LSE 5",
                                                       "LSE 6",  "LSE 7",  "LSE 8",  "LSE 9", "LSE 10", "LSE 11",
                                                       "LSE 12", "LSE 13", "LSE 14", "LSE 15"};
  const std::int64_t elements = p.rows * p.heads * p.head_dim;
  for (int i = 0; i < p.parts; ++i) {
    describe(call, kO[i], o[static_cast<std::size_t>(i)], elements, 2);
    describe(call, kLse[i], lse[static_cast<std::size_t>(i)], p.rows * p.heads, sizeof(float));
  }
  describe(call, "merged O", out_o, elements, 2);
  describe(call, "merged LSE", out_lse, p.rows * p.heads, sizeof(float));
  launch(call, kernel, merge_states_launch(p), merge_states_params(p, o, lse, out_o, out_lse));
}

void launch_append(LaunchBackend::Call& call, const AppendProblem& p, const LoadedKernel& kernel,
                   const AppendBuffers& b) {
  require_kernel(kernel.variant, KernelId::kKvAppend);
  if (p.batch == 0 || (p.seqlen_new == 0 && p.seqlen_q == 0)) return;
  describe(call, "k (new keys)", b.k_new, k_new_extent(p), 2);
  describe(call, "v (new values)", b.v_new, v_new_extent(p), 2);
  describe(call, "k_cache", b.k_cache, k_cache_extent(p), 2);
  describe(call, "v_cache", b.v_cache, v_cache_extent(p), 2);
  if (p.seqlen_q != 0) {
    describe(call, "q", b.q, q_source_extent(p), 2);
    describe(call, "q (rotated)", b.q_rot, q_rot_extent(p), 2);
  }
  if (p.rotary_dim != 0) {
    describe(call, "rotary_cos", b.rotary_cos, p.seqlen_ro * (p.rotary_dim / 2), 2);
    describe(call, "rotary_sin", b.rotary_sin, p.seqlen_ro * (p.rotary_dim / 2), 2);
  }
  describe(call, "cache_seqlens", b.cache_seqlens, p.batch, sizeof(std::int32_t));
  describe(call, "cache_seqlens (after the append)", b.seqlens_out, p.batch, sizeof(std::int32_t));
  if (p.is_paged()) describe(call, "block_table", b.block_table, p.batch * p.max_pages, sizeof(std::int32_t));
  launch(call, kernel, kv_append_launch(p), kv_append_params(p, b));
}

CallMemory::CallMemory(LaunchBackend& backend, const AttentionProblem& problem, std::size_t workspace_bytes,
                       void* stream)
    : backend_(backend), stream_(stream) {
  try {
    metadata_.cu_seqlens_q = copy(problem.cu_seqlens_q);
    metadata_.cu_seqlens_k = copy(problem.cu_seqlens_k);
    metadata_.seqlens_k = copy(problem.seqlens_k);
    metadata_.block_table = copy(problem.block_table);
    if (workspace_bytes > 0) {
      workspace_ = backend_.allocate(workspace_bytes);
      owned_.push_back(workspace_);
    }
  } catch (...) {
    release_all();
    throw;
  }
}

CallMemory::~CallMemory() {
  if (owned_.empty()) return;
  try {
    backend_.synchronize(stream_);  // the kernels may still read it
  } catch (const Error&) {
    // Already failing (a sticky error): free anyway.
  }
  // A destructor must not throw: it runs while a launch error unwinds, and
  // a free that fails on a lost context has nothing left to free.
  for (void* p : owned_) {
    try {
      backend_.release(p);
    } catch (const Error&) {
    }
  }
}

void CallMemory::finish() {
  if (owned_.empty()) return;
  backend_.synchronize(stream_);
  release_all();
}

void CallMemory::release_all() {
  for (void* p : owned_) backend_.release(p);
  owned_.clear();
}

const std::int32_t* CallMemory::copy(const std::vector<std::int32_t>& host) {
  if (host.empty()) return nullptr;
  if (backend_.host_memory()) return host.data();
  const std::size_t size = host.size() * sizeof(std::int32_t);
  void* device = backend_.allocate(size);
  owned_.push_back(device);
  backend_.copy_to_device(device, host.data(), size);
  return static_cast<const std::int32_t*>(device);
}

}  // namespace attune
