// The operator contract as code: what every backend and variant computes.
//
//   Q [B, Sq, Hq, Dk], K [B, Sk, Hkv, Dk], V [B, Sk, Hkv, Dv] -> O [B, Sq, Hq, Dv],
//   LSE [B, Hq, Sq] (float32). Packed variable length: Q [Tq, Hq, Dk],
//   K [Tk, Hkv, Dk], V [Tk, Hkv, Dv], O [Tq, Hq, Dv], LSE [Hq, Tq], with
//   sequence b owning rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]. Packed
//   queries may also attend over per-sequence keys: K [B, Sk, Hkv, Dk]
//   (no cu_seqlens_k) or a paged cache (mixed prefill and decode).
//
// Example:
//   attune::AttentionProblem p = attune::make_problem(
//       {{2, 128, 8, 64}}, {{2, 256, 2, 64}}, {{2, 256, 2, 64}},
//       {.dtype = attune::DType::kBF16, .mask = attune::Mask::causal_bottom_right()});
//   attune::validate(p, buffers);  // throws attune::InvalidArgument
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "templates/mask.h"

namespace attune {

inline constexpr int64_t kMaxHeadDim = 256;

enum class MaskKind : std::uint8_t {
  kNone,
  kCausalBottomRight,  // key j visible to query i iff j <= i + Sk - Sq
  kCausalTopLeft,      // key j visible to query i iff j <= i
  kSlidingWindow,      // |window| around the bottom-right diagonal
};

// Canonical names: "none", "causal-bottom-right", "causal-top-left", "window".
std::string_view to_string(MaskKind kind);
// The kind of that name (as to_string writes it), or nullopt.
std::optional<MaskKind> parse_mask_kind(std::string_view name);

struct Mask {
  MaskKind kind = MaskKind::kNone;
  // kSlidingWindow only: keys visible before / after the bottom-right
  // diagonal i + Sk - Sq; -1 means unbounded on that side.
  int64_t window_left = -1;
  int64_t window_right = -1;

  static Mask none() { return {}; }
  static Mask causal_bottom_right() { return {.kind = MaskKind::kCausalBottomRight}; }
  static Mask causal_top_left() { return {.kind = MaskKind::kCausalTopLeft}; }
  static Mask window(int64_t left, int64_t right) {
    return {.kind = MaskKind::kSlidingWindow, .window_left = left, .window_right = right};
  }
  bool operator==(const Mask&) const = default;
};

// Keys [begin, end) of one sequence visible to one query row. Every mask of
// the contract yields one contiguous range, computed from global positions
// within the sequence (never tile-local ones). Empty when begin >= end.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool empty() const { return begin >= end; }
};
KeyRange visible_keys(const Mask& mask, int64_t row, int64_t seqlen_q, int64_t seqlen_k);

// The same mask as the kernels take it (templates/mask.h).
MaskParams mask_params(const Mask& mask);

// Element strides of a [batch, seq, head, dim] tensor; dim is contiguous
// (stride 1). For LSE the same struct holds [batch, head, seq] strides.
// Packed (variable-length) problems have no batch axis: batch stride 0.
struct TensorStrides {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t head = 0;
  bool operator==(const TensorStrides&) const = default;
};

// Where one sequence's rows are: rows q_begin .. q_begin + q_len of Q and
// O, keys k_begin .. k_begin + k_len of K and V. The key axis holds
// k_capacity rows; those past k_len are padding (seqlens_k). Dense problems
// have q_begin = k_begin = 0 within batch b.
struct SequenceExtent {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  int64_t k_begin = 0;
  int64_t k_len = 0;
  int64_t k_capacity = 0;
};

// Score modifiers (docs/contract.md, "Score modifiers"): compile-time
// features of the kernels, so a problem without them runs the code it ran
// before they existed. Their values live in the buffers (device memory).
enum class AlibiSlopes : std::uint8_t {
  kNone,
  kPerHead,       // float32 [Hq]
  kPerBatchHead,  // float32 [B, Hq]
};

// Attention dropout (docs/contract.md, "Dropout") rides with them: like
// them it is a compile-time feature a problem turns on, keyed and tuned
// apart, though it acts on the probabilities, not the scores.
struct ScoreModifiers {
  double softcap = 0;                      // c > 0: the scaled score s becomes c tanh(s / c); 0: off
  bool sinks = false;                      // a float32 sink logit per query head, [Hq], joins every row's softmax
  AlibiSlopes alibi = AlibiSlopes::kNone;  // -slope x |i + Sk - Sq - j| added to the score
  // Dropout p in [0, 1): each probability P_ij is kept with probability
  // 1 - p (then scaled by 1 / (1 - p)) or zeroed, decided by Philox-4x32-10
  // from (seed, offset) and the element's global position
  // (templates/dropout.h); 0: off. LSE stays the one without dropout.
  double dropout_p = 0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool scores_modified() const { return softcap != 0 || sinks || alibi != AlibiSlopes::kNone; }
  bool dropout() const { return dropout_p != 0; }
  bool any() const { return scores_modified() || dropout(); }
  bool operator==(const ScoreModifiers&) const = default;
};

// The modifiers a problem uses as bits: what keys, variant ids and the
// tuning database distinguish (values such as c do not change the kernel).
inline constexpr std::uint8_t kModSoftcap = 1;
inline constexpr std::uint8_t kModSinks = 2;
inline constexpr std::uint8_t kModAlibi = 4;
inline constexpr std::uint8_t kModAll = kModSoftcap | kModSinks | kModAlibi;  // the score modifiers
inline constexpr std::uint8_t kModDropout = 8;
inline constexpr std::uint8_t kModKnown = kModAll | kModDropout;  // every bit modifier_bits sets
std::uint8_t modifier_bits(const ScoreModifiers& modifiers);
// "none", or the modifiers in use joined by '+' in a fixed order:
// "softcap", "softcap+sinks+alibi+dropout". parse_modifier_names reads both forms
// (any order), or returns nullopt.
std::string modifier_names(std::uint8_t bits);
std::optional<std::uint8_t> parse_modifier_names(std::string_view names);

// The lengths of a problem whose metadata lives in device memory
// (Runtime::plan): the host arrays stay empty, and these say which arrays
// each run passes and bound their contents, so one plan serves every batch
// that fits it. Each bound sizes the launch grid or the workspace; a run
// whose arrays hold more is outside the contract (nothing checks them on
// the device).
struct LengthBounds {
  bool cu_seqlens_q = false;  // [B+1]: packed queries
  bool cu_seqlens_k = false;  // [B+1]: packed keys (with packed queries only)
  bool seqlens_k = false;     // [B]: key padding, or a paged cache's lengths
  int64_t max_seqlen_q = 0;   // packed queries: the most query rows of one sequence
  int64_t max_seqlen_k = 0;   // the most keys of one sequence: packed keys, or else the longest seqlens_k
  int64_t max_pages = 0;      // paged: the block table's columns
  bool operator==(const LengthBounds&) const = default;
};

// Scale factors of fp8 inputs (docs/contract.md, "FP8 inputs"): an input
// is its stored value times its descale, a float32 in the buffers' memory
// at [b, kv_head] with these element strides (0 along an axis the factor
// does not vary with: both 0 for one per tensor). FlashAttention-3 takes
// q_descale, k_descale and v_descale of shape (batch, kv heads); vLLM's
// k_scale and v_scale are one per tensor.
struct DescaleStrides {
  int64_t batch = 0;
  int64_t head = 0;
  bool operator==(const DescaleStrides&) const = default;
};

struct AttentionProblem {
  // Storage dtype of Q, K and V, and of O when 16-bit. fp8 (e4m3, e5m2)
  // inputs: O is bf16 (compute_dtype).
  DType dtype = DType::kBF16;
  // K and V's storage when it differs from Q's: an fp8 KV cache (e4m3 or
  // e5m2) under fp16 or bf16 queries. Unset: dtype.
  std::optional<DType> kv_dtype;
  DescaleStrides descale_strides;  // fp8 inputs: where each [b, kv_head] factor is
  int64_t batch = 1;               // B; packed: number of sequences
  int64_t seqlen_q = 0;            // Sq; packed: total query rows Tq
  int64_t seqlen_k = 0;            // Sk; packed: total key rows Tk
  int64_t heads_q = 1;             // Hq
  int64_t heads_kv = 1;            // Hkv; Hq % Hkv == 0 (GQA / MQA)
  int64_t head_dim_k = 0;          // Dk, 1..256
  int64_t head_dim_v = 0;          // Dv, 1..256
  std::optional<double> scale;     // softmax scale; default 1/sqrt(Dk)
  Mask mask;
  std::vector<int32_t> seqlens_k;     // [B] keys per sequence (key padding); empty: all
  std::vector<int32_t> cu_seqlens_q;  // [B+1] packed query offsets; empty: dense
  std::vector<int32_t> cu_seqlens_k;  // [B+1] packed key offsets; empty: dense
  TensorStrides q_strides, k_strides, v_strides, o_strides;
  TensorStrides lse_strides;  // [batch, head, seq] order of LSE
  // Paged KV cache (page_size > 0): K and V are page pools [num_pages,
  // page_size, Hkv, D] (their strides' batch entry is the page stride) and
  // key j of sequence b lives in page block_table[b * max_pages() + j /
  // page_size] at row j % page_size. Sk = max_pages() * page_size; the keys
  // each sequence holds are seqlens_k (the cache lengths; empty: all Sk).
  std::vector<int32_t> block_table;  // [B, max_pages]
  int64_t page_size = 0;
  int64_t num_pages = 0;
  ScoreModifiers modifiers;
  // Set: the length arrays above are empty and come from device memory at
  // run time (device_lengths_of, Runtime::plan).
  std::optional<LengthBounds> device_lengths;

  // Packed queries (cu_seqlens_q). Their keys are packed too
  // (cu_seqlens_k), or per sequence: [B, Sk, Hkv, D] or a paged cache.
  bool is_packed() const { return !cu_seqlens_q.empty() || (device_lengths && device_lengths->cu_seqlens_q); }
  bool has_packed_keys() const { return !cu_seqlens_k.empty() || (device_lengths && device_lengths->cu_seqlens_k); }
  bool is_paged() const { return page_size > 0; }
  bool has_seqlens_k() const { return !seqlens_k.empty() || (device_lengths && device_lengths->seqlens_k); }
  int64_t max_pages() const {
    if (device_lengths) return is_paged() ? device_lengths->max_pages : 0;
    return is_paged() && batch > 0 ? static_cast<int64_t>(block_table.size()) / batch : 0;
  }
  // The most query rows and keys of one sequence: from the host arrays, or
  // the device lengths' bounds. Keys count a sequence's capacity (its
  // packed keys, or Sk) unless `cache_lengths`, which counts seqlens_k.
  int64_t max_seqlen_q() const;
  int64_t max_seqlen_k(bool cache_lengths = false) const;
  double softmax_scale() const;
  int64_t group_size() const { return heads_q / heads_kv; }   // query heads per kv head
  DType k_dtype() const { return kv_dtype.value_or(dtype); }  // K's and V's storage
  bool has_fp8() const { return is_fp8(dtype) || is_fp8(k_dtype()); }
  // The 16-bit dtype the kernels compute P V in and write O (and dQ, dK,
  // dV) in: dtype, or bf16 when Q is fp8.
  DType compute_dtype() const { return is_fp8(dtype) ? DType::kBF16 : dtype; }
  int64_t kv_head_of(int64_t q_head) const { return q_head / group_size(); }
  // Host length arrays only: throws InvalidArgument with device lengths.
  SequenceExtent sequence(int64_t b) const;
};

// (query, key) pairs a problem attends over, per query head: the sum over
// every sequence's rows of their visible keys. FLOPs of a forward are
// 4 x Hq x Dk x visible_pairs (docs/perf), of a backward 2.5 times that.
double visible_pairs(const AttentionProblem& problem);

// Data pointers of one call, in the memory space of the backend that runs
// it. LSE may be null (not written).
struct AttentionBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  // Score modifiers (float32, read when the problem's modifiers use them).
  const float* sinks = nullptr;         // [Hq]
  const float* alibi_slopes = nullptr;  // [Hq] or [B, Hq]
  // Dropout: {seed, offset} in this memory space, read by the kernels in
  // place of the problem's (a CUDA graph's replays draw new ones); null:
  // the problem's values.
  const std::uint64_t* rng_state = nullptr;
  // fp8 inputs: each tensor's descale factors (DescaleStrides); null: 1.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
};

// A problem's length arrays in the memory space of the backend that runs it
// (device memory on cuda): what a run of a plan passes for the arrays its
// LengthBounds name (null where it has none).
struct DeviceMetadata {
  const int32_t* cu_seqlens_q = nullptr;  // [B+1]
  const int32_t* cu_seqlens_k = nullptr;  // [B+1]
  const int32_t* seqlens_k = nullptr;     // [B]: key padding, or a paged cache's lengths
  const int32_t* block_table = nullptr;   // [B, max_pages]
  // Host value: the sequences of this run, 1..B of the plan (a smaller batch
  // than the plan was made for runs on it); -1: the plan's B.
  int64_t batch = -1;
};

// Data pointers of one backward call, in the memory space of the backend
// that runs it: the forward's inputs, its output O and LSE (as the forward
// wrote them), and dO, the gradient of the loss with respect to O (laid out
// like O). The gradients dQ, dK and dV are written in the storage dtype with
// the layouts of Q, K and V; dK and dV of a kv head sum over its query heads.
struct BackwardBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // Score modifiers, as in AttentionBuffers; with sinks the backward also
  // writes dsink [Hq] (float32), the loss's gradient with respect to sinks.
  const float* sinks = nullptr;
  const float* alibi_slopes = nullptr;
  float* dsink = nullptr;
  const std::uint64_t* rng_state = nullptr;  // dropout, as in AttentionBuffers: the forward's state
};

// A merge of `parts` partial results (O_i, LSE_i) of the same rows over
// disjoint keys (Runtime::merge_states): O [rows, heads, head_dim] in the
// storage dtype and LSE [heads, rows] float32 (natural log; -inf for a
// partial without keys), contiguous. The merged O and LSE have the same
// layouts.
struct MergeProblem {
  static constexpr int kMaxParts = 16;  // partial results one merge takes
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t heads = 1;
  int64_t head_dim = 0;
  int parts = 0;
};

// What make_problem needs besides the tensor shapes.
struct ProblemOptions {
  DType dtype = DType::kBF16;
  std::optional<DType> kv_dtype;   // an fp8 KV cache under 16-bit queries
  DescaleStrides descale_strides;  // fp8: the descales' layout
  Mask mask = Mask::none();
  std::optional<double> scale;
  std::vector<int32_t> seqlens_k;
  std::vector<int32_t> cu_seqlens_q;
  std::vector<int32_t> cu_seqlens_k;
  // Paged KV cache: K and V shapes are then [pages, page_size, Hkv, D].
  std::vector<int32_t> block_table;  // [B * max_pages], row-major
  int64_t page_size = 0;             // 0: K and V are contiguous [B, Sk, Hkv, D]
  ScoreModifiers modifiers;
};

// The problem with its host length arrays moved out: the same problem for
// Runtime::plan, with the bounds the arrays meet (each run then passes the
// arrays in device memory). A problem without length arrays is returned
// unchanged.
AttentionProblem device_lengths_of(const AttentionProblem& problem);

// Builds a problem with contiguous strides from tensor shapes: rank 4
// ([B,S,H,D]) dense, or rank 3 ([T,H,D]) packed with cu_seqlens. Checks that
// the shapes agree with each other, then validates the problem. Throws
// InvalidArgument naming the tensor, the value seen and what was expected.
AttentionProblem make_problem(std::span<const int64_t> q_shape, std::span<const int64_t> k_shape,
                              std::span<const int64_t> v_shape, ProblemOptions options);

// The contiguous cache a paged problem stands for: the problem with K and V
// [B, Sk, Hkv, D] (Sk = max_pages x page_size) and their elements gathered
// through the block table, keys past each cache length zero. What the host
// references compute from; the kernels read the pages in place.
struct UnpagedKv {
  AttentionProblem problem;
  std::vector<std::uint16_t> k;
  std::vector<std::uint16_t> v;
};
UnpagedKv unpage_kv(const AttentionProblem& problem, const std::uint16_t* k_pool, const std::uint16_t* v_pool);

// Contiguous strides for the problem's sizes (dense or packed; for a paged
// cache, K and V strides of its page pools). Throws InvalidArgument when
// they overflow int64.
void set_contiguous_strides(AttentionProblem& problem);

// Checks the problem against the contract; throws InvalidArgument.
void validate(const AttentionProblem& problem);
// Also checks the pointers: non-null inputs and output, and outputs that
// overlap neither an input nor each other.
void validate(const AttentionProblem& problem, const AttentionBuffers& buffers);
// The pointer checks alone, for a problem validated before (a plan's run).
void validate_buffers(const AttentionProblem& problem, const AttentionBuffers& buffers);
void validate_buffers(const AttentionProblem& problem, const BackwardBuffers& buffers);
// What a backward needs of the problem besides the contract: contiguous or
// packed keys (no paged cache, no per-sequence keys under packed queries).
void validate_backward(const AttentionProblem& problem);
// A merge: sizes and pointers (InvalidArgument naming the value and what
// was expected): 1..kMaxParts parts, head_dim 1..kMaxHeadDim, every input
// and out_o set when there are elements.
void validate(const MergeProblem& problem, std::span<const void* const> o, std::span<const float* const> lse,
              const void* out_o);
// The same for a backward call: non-null tensors (LSE included), gradients
// whose strides never map two elements to one address, and gradients that
// overlap neither an input nor each other. Paged caches are refused.
void validate(const AttentionProblem& problem, const BackwardBuffers& buffers);

// Host copies of a forward's float32 side tensors, as the references and
// check_modifier_values read them (null when the problem does not use one):
// the modifiers' and fp8 inputs' descales.
struct ModifierTensors {
  const float* sinks = nullptr;         // [Hq]
  const float* alibi_slopes = nullptr;  // [Hq] or [B, Hq] (AlibiSlopes)
  // fp8 inputs: at [b, kv_head] by the problem's DescaleStrides; null: 1.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
};

// Checks the values of the modifiers in host memory (the CLI's inputs, the
// emulator's buffers): every sink and slope finite. Throws InvalidArgument
// naming the first bad element ("sinks[3]: got nan; expected ...").
void check_modifier_values(const AttentionProblem& problem, const ModifierTensors& tensors);
// Elements of the ALiBi slopes tensor: Hq, or B x Hq (0 without ALiBi).
int64_t alibi_extent(const AttentionProblem& problem);

// Elements a [batches, rows, heads, dim] tensor with these strides spans
// (highest offset + 1; InvalidArgument on int64 overflow; 0 when empty).
int64_t tensor_extent(const TensorStrides& strides, int64_t batches, int64_t rows, int64_t heads, int64_t dim);
// Elements spanned by each tensor (highest offset + 1; 0 when empty).
int64_t q_extent(const AttentionProblem& problem);
int64_t k_extent(const AttentionProblem& problem);
int64_t v_extent(const AttentionProblem& problem);
int64_t o_extent(const AttentionProblem& problem);
int64_t lse_extent(const AttentionProblem& problem);

// Offset of element (b, row, head, 0) for [batch, seq, head, dim] strides;
// `row` is the global row (SequenceExtent::q_begin / k_begin + local row).
inline int64_t element_offset(const TensorStrides& s, int64_t b, int64_t row, int64_t head) {
  return b * s.batch + row * s.seq + head * s.head;
}

}  // namespace attune
