#include "runtime/launch/flash_decode_params.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "core/error.h"
#include "generated/kernel_shapes.h"

namespace attune {

namespace {

// Packed rows per block slot and the slots (query or KV heads).
std::int64_t rows_per_slot(const AttentionProblem& p, const FlashDecodeShape& s) {
  return p.max_seqlen_q() * (s.pack_gqa != 0 ? p.group_size() : 1);
}
std::int64_t slots(const AttentionProblem& p, const FlashDecodeShape& s) {
  return s.pack_gqa != 0 ? p.heads_kv : p.heads_q;
}

}  // namespace

std::int64_t longest_cache(const AttentionProblem& p) { return p.max_seqlen_k(true); }

DecodeSplit fixed_split(const AttentionProblem& p, const Variant& variant, std::int64_t split_size) {
  if (split_size < 1) {
    throw InvalidArgument("split size: got " + std::to_string(split_size) + "; expected keys per split >= 1");
  }
  const std::int64_t block_n = FlashDecodeShape::of(variant).block_n;
  const std::int64_t tiles = (split_size + block_n - 1) / block_n;
  const std::int64_t cache_tiles = (longest_cache(p) + block_n - 1) / block_n;
  const std::int64_t splits = std::max<std::int64_t>((cache_tiles + tiles - 1) / tiles, 1);
  if (splits > kMaxDecodeSplits) {
    throw InvalidArgument("split size: got " + std::to_string(split_size) + " keys, which cuts the longest cache (" +
                          std::to_string(longest_cache(p)) + " keys) into " + std::to_string(splits) +
                          " splits; expected at most " + std::to_string(kMaxDecodeSplits) +
                          " splits (a split size of at least " +
                          std::to_string((longest_cache(p) + kMaxDecodeSplits - 1) / kMaxDecodeSplits) + ")");
  }
  // Past the longest cache one split holds every sequence whole: the same
  // cuts, in int range.
  return {static_cast<int>(splits), static_cast<int>(std::min(tiles, std::max<std::int64_t>(cache_tiles, 1)))};
}

void check_splits(int splits) {
  if (splits < 1 || splits > kMaxDecodeSplits) {
    throw InvalidArgument("splits: got " + std::to_string(splits) + "; expected 1.." +
                          std::to_string(kMaxDecodeSplits));
  }
}

void check_decode_features(const AttentionProblem& p) {
  if (!p.modifiers.dropout()) return;
  std::ostringstream seen;
  seen << p.modifiers.dropout_p;
  throw InvalidArgument("decode: dropout_p " + seen.str() +
                        "; expected 0 (the split-KV decode kernels have no dropout; the forward kernels have it)");
}

std::int64_t decode_workspace_floats(const AttentionProblem& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<std::int64_t>(splits) * p.batch * p.heads_q * p.max_seqlen_q() * (p.head_dim_v + 2);
}

FlashDecodeParams flash_decode_params(const AttentionProblem& p, const AttentionBuffers& b,
                                      const DeviceMetadata& metadata, int splits, float* workspace, int split_tiles) {
  check_splits(splits);
  if (p.has_packed_keys()) {
    throw InvalidArgument("decode: packed keys (cu_seqlens_k); expected a contiguous [B, Sk, Hkv, D] or paged cache");
  }
  FlashDecodeParams k{};
  set_tensors(k, b);
  k.partial = splits > 1 ? workspace : nullptr;
  set_strides(k, p);
  k.cu_seqlens_q = p.is_packed() ? metadata.cu_seqlens_q : nullptr;
  k.cache_seqlens = p.has_seqlens_k() ? metadata.seqlens_k : nullptr;
  k.block_table = p.is_paged() ? metadata.block_table : nullptr;
  k.block_table_stride = static_cast<i32>(p.max_pages());
  k.page_size = static_cast<i32>(p.page_size);
  k.num_pages = static_cast<i32>(p.num_pages);
  k.batch = static_cast<i32>(p.batch);
  set_problem_fields(k, p);
  k.max_seqlen_q = static_cast<i32>(p.max_seqlen_q());
  k.mods = score_mod_params(p, b.sinks, b.alibi_slopes);
  k.fp8 = fp8_inputs_of(p, b);
  k.vectorized =
      rows_aligned(b.q, p.q_strides, p.is_packed()) && rows_aligned(b.k, p.k_strides) && rows_aligned(b.v, p.v_strides);
  k.splits = splits;
  k.split_tiles = split_tiles;
  return k;
}

LaunchConfig flash_decode_launch(const AttentionProblem& p, const Variant& v, int splits) {
  const FlashDecodeShape shape = FlashDecodeShape::of(v);
  const std::int64_t row_blocks = (rows_per_slot(p, shape) + shape.block_m - 1) / shape.block_m;
  return {.grid = {splits, static_cast<i32>(std::max<std::int64_t>(row_blocks * slots(p, shape), 1)),
                   static_cast<i32>(std::max<std::int64_t>(p.batch, 1))},
          .block = {v.threads(), 1, 1},
          .dynamic_shared_bytes = v.shared_bytes()};
}

const Variant& decode_combine_variant(std::uint8_t modifiers) {
  static const Variant kCombine = only_variant(KernelId::kFlashDecodeCombine);
  static const Variant kCombineSinks = only_variant(KernelId::kFlashDecodeCombine, kModSinks);
  return (modifiers & kModSinks) != 0 ? kCombineSinks : kCombine;
}

FlashDecodeCombineParams flash_decode_combine_params(const AttentionProblem& p, const AttentionBuffers& b,
                                                     const DeviceMetadata& metadata, int splits,
                                                     const float* workspace) {
  FlashDecodeCombineParams k{};
  k.partial = workspace;
  k.o = static_cast<u16*>(b.o);
  k.lse = b.lse;
  k.cu_seqlens_q = p.is_packed() ? metadata.cu_seqlens_q : nullptr;
  set_output_strides(k, p);
  k.batch = static_cast<i32>(p.batch);
  k.heads_q = static_cast<i32>(p.heads_q);
  k.seqlen_q = static_cast<i32>(p.max_seqlen_q());
  k.head_dim_v = static_cast<i32>(p.head_dim_v);
  k.splits = splits;
  k.sinks = p.modifiers.sinks ? b.sinks : nullptr;
  return k;
}

LaunchConfig flash_decode_combine_launch(const AttentionProblem& p) {
  const Variant& combine = decode_combine_variant();
  const std::int64_t warps = FlashDecodeCombineShape::of(combine).warps;
  const std::int64_t rows = p.batch * p.heads_q * p.max_seqlen_q();
  return {.grid = {static_cast<i32>(std::max<std::int64_t>((rows + warps - 1) / warps, 1)), 1, 1},
          .block = {combine.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

}  // namespace attune
