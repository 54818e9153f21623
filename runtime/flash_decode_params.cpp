#include "runtime/flash_decode_params.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"
#include "runtime/kernel_params.h"

namespace attune {

namespace {

bool packs_gqa(const Variant& v) { return v.value("kPackGqa") != 0; }

// Packed rows per block slot and the slots (query or KV heads).
std::int64_t rows_per_slot(const AttentionProblem& p, const Variant& v) {
  return p.seqlen_q * (packs_gqa(v) ? p.group_size() : 1);
}
std::int64_t slots(const AttentionProblem& p, const Variant& v) { return packs_gqa(v) ? p.heads_kv : p.heads_q; }

std::int64_t longest_cache(const AttentionProblem& p) {
  if (p.seqlens_k.empty()) return p.seqlen_k;
  return *std::max_element(p.seqlens_k.begin(), p.seqlens_k.end());
}

}  // namespace

void check_splits(int splits) {
  if (splits < 1 || splits > kMaxDecodeSplits) {
    throw InvalidArgument("splits: got " + std::to_string(splits) + "; expected 1.." +
                          std::to_string(kMaxDecodeSplits));
  }
}

std::int64_t decode_workspace_floats(const AttentionProblem& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<std::int64_t>(splits) * p.batch * p.heads_q * p.seqlen_q * (p.head_dim_v + 2);
}

FlashDecodeParams flash_decode_params(const AttentionProblem& p, const AttentionBuffers& b,
                                      const DecodeDeviceArrays& arrays, int splits, float* workspace) {
  check_splits(splits);
  if (p.is_packed()) {
    throw InvalidArgument("decode: packed (cu_seqlens) queries; expected dense [B, Sq, Hq, Dk] queries");
  }
  FlashDecodeParams k{};
  k.q = static_cast<const u16*>(b.q);
  k.k = static_cast<const u16*>(b.k);
  k.v = static_cast<const u16*>(b.v);
  k.o = static_cast<u16*>(b.o);
  k.lse = b.lse;
  k.partial = splits > 1 ? workspace : nullptr;
  set_strides(k, p);
  k.cache_seqlens = p.seqlens_k.empty() ? nullptr : arrays.cache_seqlens;
  k.block_table = p.is_paged() ? arrays.block_table : nullptr;
  k.block_table_stride = static_cast<i32>(p.max_pages());
  k.page_size = static_cast<i32>(p.page_size);
  k.batch = static_cast<i32>(p.batch);
  k.seqlen_q = static_cast<i32>(p.seqlen_q);
  k.seqlen_k = static_cast<i32>(p.seqlen_k);
  k.heads_q = static_cast<i32>(p.heads_q);
  k.group_size = static_cast<i32>(p.group_size());
  k.head_dim_k = static_cast<i32>(p.head_dim_k);
  k.head_dim_v = static_cast<i32>(p.head_dim_v);
  k.mask = mask_params(p.mask);
  k.scale_log2 = static_cast<float>(p.softmax_scale() * std::numbers::log2e);
  k.vectorized = rows_aligned(b.q, p.q_strides) && rows_aligned(b.k, p.k_strides) && rows_aligned(b.v, p.v_strides);
  k.splits = splits;
  return k;
}

LaunchConfig flash_decode_launch(const AttentionProblem& p, const Variant& v, int splits) {
  const std::int64_t block_m = v.value("kBlockM");
  const std::int64_t row_blocks = (rows_per_slot(p, v) + block_m - 1) / block_m;
  return {.grid = {splits, static_cast<i32>(std::max<std::int64_t>(row_blocks * slots(p, v), 1)),
                   static_cast<i32>(std::max<std::int64_t>(p.batch, 1))},
          .block = {v.threads(), 1, 1},
          .dynamic_shared_bytes = v.shared_bytes()};
}

const Variant& decode_combine_variant() {
  static const Variant kCombine = [] {
    const KernelSpec* spec = find_kernel_spec("flash_decode_combine");
    if (spec == nullptr) throw Error("decode: the flash_decode_combine kernel is not in this build");
    return Variant{spec, {spec->tunables.front().values.front()}};
  }();
  return kCombine;
}

FlashDecodeCombineParams flash_decode_combine_params(const AttentionProblem& p, const AttentionBuffers& b, int splits,
                                                     const float* workspace) {
  FlashDecodeCombineParams k{};
  k.partial = workspace;
  k.o = static_cast<u16*>(b.o);
  k.lse = b.lse;
  set_output_strides(k, p);
  k.batch = static_cast<i32>(p.batch);
  k.heads_q = static_cast<i32>(p.heads_q);
  k.seqlen_q = static_cast<i32>(p.seqlen_q);
  k.head_dim_v = static_cast<i32>(p.head_dim_v);
  k.splits = splits;
  return k;
}

LaunchConfig flash_decode_combine_launch(const AttentionProblem& p) {
  const Variant& combine = decode_combine_variant();
  const std::int64_t warps = combine.value("kWarps");
  const std::int64_t rows = p.batch * p.heads_q * p.seqlen_q;
  return {.grid = {static_cast<i32>(std::max<std::int64_t>((rows + warps - 1) / warps, 1)), 1, 1},
          .block = {combine.threads(), 1, 1},
          .dynamic_shared_bytes = 0};
}

Variant heuristic_decode_variant(const AttentionProblem& p, const ArchLimits& arch) {
  const auto dk = static_cast<int>(p.head_dim_k);
  const auto dv = static_cast<int>(p.head_dim_v);
  const std::vector<Variant> candidates = enumerate_variants("decode", p.dtype, dk, dv, arch);
  if (candidates.empty()) {
    throw InvalidArgument("no decode variant fits Dk " + std::to_string(dk) + ", Dv " + std::to_string(dv) + " on " +
                          arch.name);
  }
  const int pack = p.group_size() > 1 ? 1 : 0;
  const std::int64_t rows = p.seqlen_q * (pack != 0 ? p.group_size() : 1);
  const int bucket = candidates.front().values.front();
  // Few rows: one 16-row warp row, four warps sharing each 64-key tile.
  const std::vector<int> wanted =
      rows <= 16 ? std::vector<int>{bucket, 16, 64, 4, 2, pack} : std::vector<int>{bucket, 64, 64, 1, 2, pack};
  return nearest_variant(candidates, wanted);
}

int heuristic_splits(const AttentionProblem& p, const Variant& v, int sm_count) {
  const LaunchConfig one = flash_decode_launch(p, v, 1);
  const std::int64_t ctas = static_cast<std::int64_t>(one.grid.y) * one.grid.z;
  const std::int64_t block_n = v.value("kBlockN");
  const std::int64_t tiles = std::max<std::int64_t>((longest_cache(p) + block_n - 1) / block_n, 1);
  const std::int64_t most = std::min<std::int64_t>({tiles, kMaxDecodeSplits, 2 * std::max(sm_count, 1)});
  // Wave efficiency: the share of the last wave's SMs that have work; take
  // the fewest splits within 85% of the best, since each split adds a
  // workspace round trip and combine work.
  const auto efficiency = [&](std::int64_t s) {
    const double waves = static_cast<double>(ctas * s) / std::max(sm_count, 1);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (std::int64_t s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (std::int64_t s = 1; s <= most; ++s) {
    if (efficiency(s) >= 0.85 * best) return static_cast<int>(s);
  }
  return 1;
}

}  // namespace attune
