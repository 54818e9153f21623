#include "core/problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>

#include "core/enum_names.h"
#include "core/error.h"

namespace attune {

namespace {

// One message shape for every contract violation: what, seen, expected.
[[noreturn]] void reject(const std::string& what, const std::string& seen, const std::string& expected) {
  throw InvalidArgument(what + ": got " + seen + "; expected " + expected);
}

std::string shape_string(std::span<const int64_t> shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i != 0 ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string str(int64_t value) { return std::to_string(value); }

// Sizes and strides come from callers: products and sums of them are
// checked, so a problem too large for int64 offsets is refused by name
// instead of wrapping around.
// `what` and `detail` make the message, built only on overflow (validate
// runs on every call).
[[noreturn]] void reject_overflow(int64_t a, const char* op, int64_t b, std::string_view what,
                                  std::string_view detail) {
  reject(std::string(what) + std::string(detail), str(a) + op + str(b) + ", which overflows int64",
         "sizes and strides whose offsets fit in int64");
}
int64_t mul(int64_t a, int64_t b, std::string_view what, std::string_view detail = {}) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) reject_overflow(a, " x ", b, what, detail);
  return r;
}
int64_t add(int64_t a, int64_t b, std::string_view what, std::string_view detail = {}) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) reject_overflow(a, " + ", b, what, detail);
  return r;
}

void check_modifiers(const ScoreModifiers& m) {
  // The kernels hold c in float: beyond float's range it is infinite there.
  if (m.softcap != 0 && !(m.softcap > 0 && m.softcap <= std::numeric_limits<float>::max())) {
    std::ostringstream seen;
    seen << m.softcap;
    reject("softcap", seen.str(), "a finite value > 0 within float range (0 turns softcapping off)");
  }
  if (m.alibi != AlibiSlopes::kNone && m.alibi != AlibiSlopes::kPerHead && m.alibi != AlibiSlopes::kPerBatchHead) {
    reject("alibi slopes layout", "enum value " + str(static_cast<int64_t>(m.alibi)), "none, [Hq] or [B, Hq]");
  }
  if (!(m.dropout_p >= 0 && m.dropout_p < 1)) {
    std::ostringstream seen;
    seen << m.dropout_p;
    reject("dropout_p", seen.str(), "a probability in [0, 1) (0 turns dropout off)");
  }
}

void check_finite(const float* values, int64_t count, const char* name, const char* expected) {
  if (count > 0 && values == nullptr) reject(std::string(name) + " pointer", "null", expected);
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      std::ostringstream seen;
      seen << values[i];
      reject(std::string(name) + "[" + str(i) + "]", seen.str(), "finite float32 values");
    }
  }
}

// The modifiers' tensors exist when the problem uses them (their values are
// in the backend's memory: check_modifier_values reads host ones).
void check_modifier_pointers(const AttentionProblem& p, const float* sinks, const float* alibi_slopes) {
  if (p.modifiers.sinks && sinks == nullptr) reject("sinks pointer", "null", "a float32 [Hq] tensor of sink logits");
  if (p.modifiers.alibi != AlibiSlopes::kNone && alibi_slopes == nullptr) {
    reject("alibi_slopes pointer", "null",
           p.modifiers.alibi == AlibiSlopes::kPerHead ? "a float32 [Hq] tensor" : "a float32 [B, Hq] tensor");
  }
}

void check_lengths(const std::vector<int32_t>& cu, const char* name, int64_t batch, int64_t total,
                   const char* total_name) {
  if (static_cast<int64_t>(cu.size()) != batch + 1) {
    reject(std::string(name) + " length", str(static_cast<int64_t>(cu.size())),
           str(batch + 1) + " (number of sequences + 1)");
  }
  if (cu.front() != 0) reject(std::string(name) + "[0]", str(cu.front()), "0 (offsets start at 0)");
  for (std::size_t b = 1; b < cu.size(); ++b) {
    if (cu[b] < cu[b - 1]) {
      reject(std::string(name) + "[" + str(static_cast<int64_t>(b)) + "] = " + str(cu[b]) + " is below " + name + "[" +
                 str(static_cast<int64_t>(b) - 1) + "]",
             str(cu[b]), "non-decreasing offsets");
    }
  }
  if (cu.back() > total) {
    reject(std::string(name) + " last entry", str(cu.back()),
           "at most " + str(total) + " (" + total_name + ", the packed rows)");
  }
}

// Elements spanned by a tensor of `rows` x `heads` x `dim` with the given
// strides over `batches` batches.
int64_t extent(const TensorStrides& s, int64_t batches, int64_t rows, int64_t heads, int64_t dim) {
  if (batches <= 0 || rows <= 0 || heads <= 0 || dim <= 0) return 0;
  constexpr std::string_view kWhat = "tensor extent";
  return add(add(add(mul(batches - 1, s.batch, kWhat), mul(rows - 1, s.seq, kWhat), kWhat),
                 mul(heads - 1, s.head, kWhat), kWhat),
             dim, kWhat);
}

// Batches of the query-side tensors (Q, O, LSE) and of contiguous K and V.
int64_t batches_of(const AttentionProblem& p) { return p.is_packed() ? 1 : p.batch; }
int64_t key_batches_of(const AttentionProblem& p) { return p.has_packed_keys() ? 1 : p.batch; }

void check_strides(const TensorStrides& s, const char* name) {
  if (s.batch < 0 || s.seq < 0 || s.head < 0) {
    reject(std::string(name) + " strides", "[" + str(s.batch) + ", " + str(s.seq) + ", " + str(s.head) + "]",
           "non-negative element strides");
  }
}

// An output must not write one element twice: ordered by stride, every axis
// must step over the whole extent of the axes below it.
void check_no_self_overlap(const char* name, std::array<std::pair<int64_t, int64_t>, 4> stride_and_size) {
  for (const auto& axis : stride_and_size) {
    if (axis.second == 0) return;  // no elements, nothing to collide
  }
  std::sort(stride_and_size.begin(), stride_and_size.end());
  int64_t span = 1;
  for (const auto& [stride, size] : stride_and_size) {
    if (size <= 1) continue;
    if (stride < span) {
      reject(std::string(name) + " strides", "an axis of stride " + str(stride) + " inside a span of " + str(span),
             "output strides that never map two elements to one address");
    }
    span = add(mul(stride, size - 1, name, " strides"), span, name, " strides");
  }
}

// check_no_self_overlap of a [batches, seqlen, heads, head_dim] output with
// these strides and contiguous elements.
void check_output_strides(const char* name, const TensorStrides& s, int64_t batches, int64_t seqlen, int64_t heads,
                          int64_t head_dim) {
  check_no_self_overlap(name, {{{s.batch, batches}, {s.seq, seqlen}, {s.head, heads}, {1, head_dim}}});
}

struct ByteSpan {
  const char* name;
  std::uintptr_t begin;
  std::uintptr_t end;
};

ByteSpan span_of(const char* name, const void* ptr, int64_t elements, int64_t element_size) {
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  return {name, begin, begin + static_cast<std::uintptr_t>(elements * element_size)};
}

bool overlaps(const ByteSpan& a, const ByteSpan& b) {
  return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
}

void check_paged_options(const ProblemOptions& o, int64_t batch, std::span<const int64_t> k_shape,
                         std::span<const int64_t> v_shape) {
  if (o.page_size < 1) reject("page size", str(o.page_size), "a page size >= 1 with a block table");
  if (o.block_table.empty()) reject("block table", "empty", "a block table [B, max_pages] with a page size");
  for (const auto& [name, shape] : {std::pair{"K", k_shape}, std::pair{"V", v_shape}}) {
    if (shape[1] != o.page_size) {
      reject(std::string(name) + " page pool", shape_string(shape),
             "[pages, page_size = " + str(o.page_size) + ", Hkv, D]");
    }
  }
  if (batch > 0 && static_cast<int64_t>(o.block_table.size()) % batch != 0) {
    reject("block table", str(static_cast<int64_t>(o.block_table.size())) + " entries",
           "B x max_pages entries (B = " + str(batch) + ")");
  }
}

// A problem whose lengths come from device memory: the bounds fit the
// tensors, and the arrays stay empty (one source of lengths).
void check_device_lengths(const AttentionProblem& p, const LengthBounds& l) {
  if (!p.cu_seqlens_q.empty() || !p.cu_seqlens_k.empty() || !p.seqlens_k.empty() || !p.block_table.empty()) {
    reject("length arrays", "host arrays with device lengths", "one or the other (device_lengths_of moves them)");
  }
  if (l.cu_seqlens_q && (l.max_seqlen_q < 0 || l.max_seqlen_q > p.seqlen_q)) {
    reject("device lengths max_seqlen_q", str(l.max_seqlen_q), "0.." + str(p.seqlen_q) + " (Tq, the packed rows)");
  }
  if ((l.cu_seqlens_k || l.seqlens_k) && (l.max_seqlen_k < 0 || l.max_seqlen_k > p.seqlen_k)) {
    reject("device lengths max_seqlen_k", str(l.max_seqlen_k),
           "0.." + str(p.seqlen_k) + (l.cu_seqlens_k ? " (Tk, the packed keys)" : " (Sk)"));
  }
  if (!p.is_paged() && l.max_pages != 0) {
    reject("device lengths max_pages", str(l.max_pages), "0 without a paged cache");
  }
}

void check_paged(const AttentionProblem& p) {
  if (p.has_packed_keys()) reject("paged KV cache", "packed keys (cu_seqlens_k)", "keys in the pages only");
  if (p.num_pages < 0) reject("page pool", str(p.num_pages) + " pages", "a non-negative page count");
  if (p.device_lengths) {
    if (p.max_pages() < 1) reject("device lengths max_pages", str(p.max_pages()), "max_pages >= 1 for a paged cache");
    if (p.seqlen_k != mul(p.max_pages(), p.page_size, "paged cache keys (max_pages x page_size)")) {
      reject("key length Sk of a paged cache", str(p.seqlen_k),
             str(p.max_pages() * p.page_size) + " (max_pages x page_size)");
    }
    return;  // the block table is in device memory
  }
  if (p.batch > 0 && (p.block_table.empty() || static_cast<int64_t>(p.block_table.size()) % p.batch != 0)) {
    reject("block table", str(static_cast<int64_t>(p.block_table.size())) + " entries",
           "B x max_pages entries with max_pages >= 1 (B = " + str(p.batch) + ")");
  }
  if (p.seqlen_k != mul(p.max_pages(), p.page_size, "paged cache keys (max_pages x page_size)")) {
    reject("key length Sk of a paged cache", str(p.seqlen_k),
           str(p.max_pages() * p.page_size) + " (max_pages x page_size)");
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t keys = p.seqlens_k.empty() ? p.seqlen_k : p.seqlens_k[static_cast<std::size_t>(b)];
    const int64_t pages_used = (keys + p.page_size - 1) / p.page_size;
    for (int64_t i = 0; i < pages_used; ++i) {
      const int32_t page = p.block_table[static_cast<std::size_t>(b * p.max_pages() + i)];
      if (page < 0 || page >= p.num_pages) {
        reject("block_table[" + str(b) + ", " + str(i) + "]", str(page),
               "a page index in [0, " + str(p.num_pages) + ") (the pool's pages)");
      }
    }
  }
}
}  // namespace

constexpr NamedValue<MaskKind> kMaskKindNames[] = {{MaskKind::kNone, "none"},
                                                   {MaskKind::kCausalBottomRight, "causal-bottom-right"},
                                                   {MaskKind::kCausalTopLeft, "causal-top-left"},
                                                   {MaskKind::kSlidingWindow, "window"}};

std::string_view to_string(MaskKind kind) { return name_of(kMaskKindNames, kind); }

std::optional<MaskKind> parse_mask_kind(std::string_view name) { return value_of(kMaskKindNames, name); }

MaskParams mask_params(const Mask& mask) {
  switch (mask.kind) {
    case MaskKind::kNone:
      return {};
    case MaskKind::kCausalBottomRight:
      return {.left = -1, .right = 0};
    case MaskKind::kCausalTopLeft:
      return {.left = -1, .right = 0, .top_left = 1};
    case MaskKind::kSlidingWindow:
      return {.left = static_cast<i32>(mask.window_left), .right = static_cast<i32>(mask.window_right)};
  }
  return {};
}

KeyRange visible_keys(const Mask& mask, int64_t row, int64_t seqlen_q, int64_t seqlen_k) {
  const KeyBounds b = key_bounds(mask_params(mask), row, seqlen_q, seqlen_k);
  return {b.begin, std::max(b.begin, b.end)};
}

double visible_pairs(const AttentionProblem& p) {
  double pairs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t i = 0; i < s.q_len; ++i) {
      const KeyRange r = visible_keys(p.mask, i, s.q_len, s.k_len);
      pairs += static_cast<double>(r.end - r.begin);
    }
  }
  return pairs;
}

double AttentionProblem::softmax_scale() const {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim_k)));
}

SequenceExtent AttentionProblem::sequence(int64_t b) const {
  if (device_lengths) {
    throw InvalidArgument("sequence " + str(b) +
                          ": the problem's lengths are in device memory; expected a problem with host lengths");
  }
  SequenceExtent e;
  const auto i = static_cast<std::size_t>(b);
  e.q_len = seqlen_q;
  e.k_len = seqlen_k;
  if (is_packed()) {
    e.q_begin = cu_seqlens_q[i];
    e.q_len = cu_seqlens_q[i + 1] - cu_seqlens_q[i];
  }
  if (has_packed_keys()) {
    e.k_begin = cu_seqlens_k[i];
    e.k_len = cu_seqlens_k[i + 1] - cu_seqlens_k[i];
  }
  e.k_capacity = e.k_len;
  if (!seqlens_k.empty()) e.k_len = seqlens_k[i];
  return e;
}

int64_t AttentionProblem::max_seqlen_q() const {
  if (!is_packed()) return seqlen_q;
  if (device_lengths) return device_lengths->max_seqlen_q;
  int64_t most = 0;
  for (int64_t b = 0; b < batch; ++b) most = std::max(most, sequence(b).q_len);
  return most;
}

int64_t AttentionProblem::max_seqlen_k(bool cache_lengths) const {
  if (device_lengths) {
    const bool bounded = has_packed_keys() || (cache_lengths && has_seqlens_k());
    return bounded ? device_lengths->max_seqlen_k : seqlen_k;
  }
  int64_t most = has_packed_keys() || (cache_lengths && has_seqlens_k()) ? 0 : seqlen_k;
  for (int64_t b = 0; b < batch && most < seqlen_k; ++b) {
    const SequenceExtent s = sequence(b);
    most = std::max(most, cache_lengths ? s.k_len : s.k_capacity);
  }
  return most;
}

AttentionProblem device_lengths_of(const AttentionProblem& p) {
  if (p.device_lengths || (!p.is_packed() && !p.has_seqlens_k() && !p.is_paged())) return p;
  AttentionProblem d = p;
  LengthBounds& l = d.device_lengths.emplace();
  l.cu_seqlens_q = p.is_packed();
  l.cu_seqlens_k = p.has_packed_keys();
  l.seqlens_k = p.has_seqlens_k();
  l.max_seqlen_q = p.is_packed() ? p.max_seqlen_q() : 0;
  // Packed keys: the longest packed sequence (the capacity the backward's
  // grid covers); otherwise the longest cache length.
  l.max_seqlen_k = l.cu_seqlens_k ? p.max_seqlen_k(false) : l.seqlens_k ? p.max_seqlen_k(true) : 0;
  l.max_pages = p.max_pages();
  d.cu_seqlens_q.clear();
  d.cu_seqlens_k.clear();
  d.seqlens_k.clear();
  d.block_table.clear();
  return d;
}

void set_contiguous_strides(AttentionProblem& p) {
  const auto contiguous = [&](int64_t heads, int64_t dim, int64_t rows, bool packed) {
    const int64_t seq = mul(heads, dim, "contiguous strides (heads x head dim)");
    return TensorStrides{
        .batch = packed ? 0 : mul(rows, seq, "contiguous strides (rows x heads x head dim)"), .seq = seq, .head = dim};
  };
  p.q_strides = contiguous(p.heads_q, p.head_dim_k, p.seqlen_q, p.is_packed());
  p.k_strides = contiguous(p.heads_kv, p.head_dim_k, p.seqlen_k, p.has_packed_keys());
  p.v_strides = contiguous(p.heads_kv, p.head_dim_v, p.seqlen_k, p.has_packed_keys());
  p.o_strides = contiguous(p.heads_q, p.head_dim_v, p.seqlen_q, p.is_packed());
  p.lse_strides = {
      .batch = p.is_packed() ? 0 : mul(p.heads_q, p.seqlen_q, "LSE strides (Hq x Sq)"), .seq = 1, .head = p.seqlen_q};
  if (p.is_paged()) {
    // Pools: one page of rows per "batch" entry.
    p.k_strides.batch = mul(p.page_size, p.k_strides.seq, "K page stride");
    p.v_strides.batch = mul(p.page_size, p.v_strides.seq, "V page stride");
  }
}

AttentionProblem make_problem(std::span<const int64_t> q_shape, std::span<const int64_t> k_shape,
                              std::span<const int64_t> v_shape, ProblemOptions options) {
  const bool packed = !options.cu_seqlens_q.empty();       // Q, O: [Tq, H, D]
  const bool packed_keys = !options.cu_seqlens_k.empty();  // K, V: [Tk, Hkv, D]
  const bool paged = options.page_size != 0 || !options.block_table.empty();
  if (packed_keys && !packed) {
    reject("cu_seqlens", "only cu_seqlens_k", "cu_seqlens_q too (packed keys need packed queries)");
  }
  if (paged && packed_keys) {
    reject("paged KV cache", "cu_seqlens_k given too", "keys in the pages only (cu_seqlens_q may pack the queries)");
  }
  const auto layout = [](bool packed_tensor) {
    return packed_tensor ? "[T, H, D] (packed, with cu_seqlens)" : "[B, S, H, D]";
  };
  const std::array<std::tuple<const char*, std::span<const int64_t>, bool>, 3> tensors = {
      {{"Q", q_shape, packed}, {"K", k_shape, packed_keys}, {"V", v_shape, packed_keys}}};
  for (const auto& [name, shape, packed_tensor] : tensors) {
    const std::size_t rank = packed_tensor ? 3 : 4;
    if (shape.size() != rank) {
      reject(std::string(name) + " shape",
             shape_string(shape) + " (rank " + str(static_cast<int64_t>(shape.size())) + ")",
             std::string("rank ") + str(static_cast<int64_t>(rank)) + " " + layout(packed_tensor) +
                 (packed && !packed_keys && name != std::string_view("Q")
                      ? " (packed queries over per-sequence or paged keys; packed K needs cu_seqlens_k)"
                      : ""));
    }
    for (int64_t d : shape) {
      if (d < 0) reject(std::string(name) + " shape", shape_string(shape), "non-negative sizes");
    }
  }
  const std::size_t oq = packed ? 0 : 1;      // offset of Q's sequence axis
  const std::size_t o = packed_keys ? 0 : 1;  // ... and of K's and V's
  const int64_t batch = packed ? static_cast<int64_t>(options.cu_seqlens_q.size()) - 1 : q_shape[0];
  if (paged) check_paged_options(options, batch, k_shape, v_shape);
  if (!packed_keys && !paged && (k_shape[0] != batch || v_shape[0] != batch)) {
    reject("batch size",
           (packed ? "cu_seqlens_q " : "Q ") + str(batch) + ", K " + str(k_shape[0]) + ", V " + str(v_shape[0]),
           packed ? "K and V [B, Sk, Hkv, D] with one batch entry per sequence" : "Q, K and V to share B");
  }
  if (paged && (k_shape[0] != v_shape[0] || k_shape[1] != v_shape[1])) {
    reject("page pools", "K " + shape_string(k_shape) + " and V " + shape_string(v_shape),
           "K and V pools with the same pages and page size");
  }
  if (k_shape[o] != v_shape[o]) {
    reject("key count", "K " + shape_string(k_shape) + " and V " + shape_string(v_shape),
           "K and V with the same sequence length Sk");
  }
  if (k_shape[o + 1] != v_shape[o + 1]) {
    reject("kv heads", "K " + str(k_shape[o + 1]) + " heads, V " + str(v_shape[o + 1]) + " heads",
           "K and V with the same number of heads Hkv");
  }
  if (q_shape[oq + 2] != k_shape[o + 2]) {
    reject("head dim of Q and K", "Q " + shape_string(q_shape) + ", K " + shape_string(k_shape),
           "Q and K with the same last dimension Dk");
  }

  AttentionProblem p;
  p.dtype = options.dtype;
  p.kv_dtype = options.kv_dtype;
  p.descale_strides = options.descale_strides;
  p.batch = batch;
  p.seqlen_q = q_shape[oq];
  p.seqlen_k = k_shape[o];
  p.heads_q = q_shape[oq + 1];
  p.heads_kv = k_shape[o + 1];
  p.head_dim_k = q_shape[oq + 2];
  p.head_dim_v = v_shape[o + 2];
  p.scale = options.scale;
  p.mask = options.mask;
  p.modifiers = options.modifiers;
  p.seqlens_k = std::move(options.seqlens_k);
  p.cu_seqlens_q = std::move(options.cu_seqlens_q);
  p.cu_seqlens_k = std::move(options.cu_seqlens_k);
  if (paged) {
    p.page_size = options.page_size;
    p.num_pages = k_shape[0];
    p.block_table = std::move(options.block_table);
    p.seqlen_k = mul(p.max_pages(), p.page_size, "paged cache keys (max_pages x page_size)");
  }
  if (packed_keys && p.cu_seqlens_k.size() != p.cu_seqlens_q.size()) {
    reject("cu_seqlens_k length", str(static_cast<int64_t>(p.cu_seqlens_k.size())),
           str(static_cast<int64_t>(p.cu_seqlens_q.size())) + ", the length of cu_seqlens_q");
  }
  set_contiguous_strides(p);
  validate(p);
  return p;
}

UnpagedKv unpage_kv(const AttentionProblem& p, const std::uint16_t* k_pool, const std::uint16_t* v_pool) {
  validate(p);
  if (!p.is_paged()) throw InvalidArgument("unpage_kv: the problem has no paged KV cache; expected a paged one");
  UnpagedKv out{p, {}, {}};
  AttentionProblem& c = out.problem;
  c.block_table.clear();
  c.page_size = 0;
  c.num_pages = 0;
  c.k_strides = {
      .batch = c.seqlen_k * c.heads_kv * c.head_dim_k, .seq = c.heads_kv * c.head_dim_k, .head = c.head_dim_k};
  c.v_strides = {
      .batch = c.seqlen_k * c.heads_kv * c.head_dim_v, .seq = c.heads_kv * c.head_dim_v, .head = c.head_dim_v};
  out.k.assign(static_cast<std::size_t>(k_extent(c)), 0);
  out.v.assign(static_cast<std::size_t>(v_extent(c)), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent seq = p.sequence(b);
    for (int64_t j = 0; j < seq.k_len; ++j) {
      const int64_t page = p.block_table[static_cast<std::size_t>(b * p.max_pages() + j / p.page_size)];
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t k_from = element_offset(p.k_strides, page, j % p.page_size, h);
        const int64_t v_from = element_offset(p.v_strides, page, j % p.page_size, h);
        std::copy_n(k_pool + k_from, p.head_dim_k, out.k.begin() + element_offset(c.k_strides, b, j, h));
        std::copy_n(v_pool + v_from, p.head_dim_v, out.v.begin() + element_offset(c.v_strides, b, j, h));
      }
    }
  }
  return out;
}

std::uint8_t modifier_bits(const ScoreModifiers& m) {
  return static_cast<std::uint8_t>((m.softcap != 0 ? kModSoftcap : 0) | (m.sinks ? kModSinks : 0) |
                                   (m.alibi != AlibiSlopes::kNone ? kModAlibi : 0) | (m.dropout() ? kModDropout : 0));
}

namespace {
constexpr std::array<std::pair<std::uint8_t, std::string_view>, 4> kModifierNames = {
    {{kModSoftcap, "softcap"}, {kModSinks, "sinks"}, {kModAlibi, "alibi"}, {kModDropout, "dropout"}}};
}  // namespace

std::string modifier_names(std::uint8_t bits) {
  std::string out;
  for (const auto& [bit, name] : kModifierNames) {
    if ((bits & bit) != 0) out += (out.empty() ? "" : "+") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

std::optional<std::uint8_t> parse_modifier_names(std::string_view names) {
  if (names == "none") return 0;
  std::uint8_t bits = 0;
  while (!names.empty()) {
    const std::size_t plus = names.find('+');
    const std::string_view part = names.substr(0, plus);
    const auto* found = std::find_if(kModifierNames.begin(), kModifierNames.end(),
                                     [&](const auto& entry) { return entry.second == part; });
    if (found == kModifierNames.end() || (bits & found->first) != 0) return std::nullopt;
    bits = static_cast<std::uint8_t>(bits | found->first);
    if (plus == std::string_view::npos) break;
    names = names.substr(plus + 1);
    if (names.empty()) return std::nullopt;  // a trailing '+'
  }
  return bits == 0 ? std::nullopt : std::optional<std::uint8_t>(bits);
}

int64_t alibi_extent(const AttentionProblem& p) {
  switch (p.modifiers.alibi) {
    case AlibiSlopes::kPerHead:
      return p.heads_q;
    case AlibiSlopes::kPerBatchHead:
      return mul(p.batch, p.heads_q, "ALiBi slopes [B, Hq]");
    default:
      return 0;
  }
}

void check_modifier_values(const AttentionProblem& p, const ModifierTensors& tensors) {
  if (p.modifiers.sinks) check_finite(tensors.sinks, p.heads_q, "sinks", "a float32 [Hq] tensor of sink logits");
  if (p.modifiers.alibi != AlibiSlopes::kNone) {
    check_finite(tensors.alibi_slopes, alibi_extent(p), "alibi_slopes", "a float32 [Hq] or [B, Hq] tensor of slopes");
  }
}

void validate(const AttentionProblem& p) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16 && !is_fp8(p.dtype)) {
    reject("dtype", "enum value " + str(static_cast<int64_t>(p.dtype)), "fp16, bf16, e4m3 or e5m2");
  }
  if (p.kv_dtype) {
    const DType kv = *p.kv_dtype;
    if (!is_fp8(kv) && kv != DType::kF16 && kv != DType::kBF16) {
      reject("kv dtype", "enum value " + str(static_cast<int64_t>(kv)), "fp16, bf16, e4m3 or e5m2");
    }
    // The kernels widen fp8 to the queries' dtype: 16-bit K and V under
    // other queries would need a second 16-bit type.
    if (!is_fp8(kv) && kv != p.dtype) {
      reject("kv dtype", std::string(to_string(kv)) + " under " + std::string(to_string(p.dtype)) + " queries",
             "the queries' dtype, or e4m3 / e5m2 (an fp8 KV cache)");
    }
    if (is_fp8(p.dtype) && kv != p.dtype) {
      reject("kv dtype", std::string(to_string(kv)) + " under " + std::string(to_string(p.dtype)) + " queries",
             "K and V in the queries' fp8 format");
    }
  }
  if (p.descale_strides.batch < 0 || p.descale_strides.head < 0) {
    reject("descale strides", str(p.descale_strides.batch) + ", " + str(p.descale_strides.head),
           "element strides >= 0 along batch and kv heads");
  }
  if (p.has_fp8() && p.modifiers.dropout()) {
    reject("dropout", "p = " + std::to_string(p.modifiers.dropout_p) + " with fp8 inputs",
           "no dropout with fp8 inputs (an inference format; the backward takes 16-bit inputs)");
  }
  if (p.batch < 0) reject("batch size B", str(p.batch), "B >= 0");
  if (p.seqlen_q < 0) reject("query length Sq", str(p.seqlen_q), "Sq >= 0");
  if (p.seqlen_k < 0) reject("key length Sk", str(p.seqlen_k), "Sk >= 0");
  if (p.heads_q < 1) reject("query heads Hq", str(p.heads_q), "Hq >= 1");
  if (p.heads_kv < 1) reject("kv heads Hkv", str(p.heads_kv), "Hkv >= 1");
  // The kernels take sizes as int32 (and cu_seqlens are int32).
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  const std::array<std::tuple<const char*, int64_t>, 5> sizes = {{{"batch size B", p.batch},
                                                                  {"query length Sq", p.seqlen_q},
                                                                  {"key length Sk", p.seqlen_k},
                                                                  {"query heads Hq", p.heads_q},
                                                                  {"kv heads Hkv", p.heads_kv}}};
  for (const auto& [name, value] : sizes) {
    if (value > kInt32Max) reject(name, str(value), "at most 2^31 - 1 (int32 on the device)");
  }
  if (p.heads_q % p.heads_kv != 0) {
    reject("query heads Hq = " + str(p.heads_q) + " with kv heads Hkv = " + str(p.heads_kv),
           "Hq % Hkv = " + str(p.heads_q % p.heads_kv), "Hq to be a multiple of Hkv (GQA/MQA)");
  }
  if (p.head_dim_k < 1 || p.head_dim_k > kMaxHeadDim) {
    reject("head dim Dk", str(p.head_dim_k), "1 <= Dk <= " + str(kMaxHeadDim));
  }
  if (p.head_dim_v < 1 || p.head_dim_v > kMaxHeadDim) {
    reject("head dim Dv", str(p.head_dim_v), "1 <= Dv <= " + str(kMaxHeadDim));
  }
  // The kernels scale in float: a scale beyond float's range is infinite there.
  if (p.scale && !(std::abs(*p.scale) <= std::numeric_limits<float>::max())) {
    std::ostringstream seen;
    seen << *p.scale;
    reject("scale", seen.str(), "a finite number within float range (|scale| <= 3.4e38)");
  }
  check_modifiers(p.modifiers);
  switch (p.mask.kind) {
    case MaskKind::kNone:
    case MaskKind::kCausalBottomRight:
    case MaskKind::kCausalTopLeft:
      break;
    case MaskKind::kSlidingWindow:
      if (p.mask.window_left < -1 || p.mask.window_right < -1 ||
          p.mask.window_left > std::numeric_limits<int32_t>::max() ||
          p.mask.window_right > std::numeric_limits<int32_t>::max()) {
        reject("window", str(p.mask.window_left) + "," + str(p.mask.window_right),
               "LEFT,RIGHT key counts >= 0, or -1 for unbounded");
      }
      break;
    default:
      reject("mask kind", "enum value " + str(static_cast<int64_t>(p.mask.kind)),
             "none, causal-bottom-right, causal-top-left or window");
  }

  if (p.has_packed_keys() && !p.is_packed()) {
    reject("cu_seqlens", "only cu_seqlens_k", "cu_seqlens_q too (packed keys need packed queries)");
  }
  if (p.device_lengths) {
    check_device_lengths(p, *p.device_lengths);
  } else if (p.is_packed()) {
    check_lengths(p.cu_seqlens_q, "cu_seqlens_q", p.batch, p.seqlen_q, "Tq");
    if (p.has_packed_keys()) check_lengths(p.cu_seqlens_k, "cu_seqlens_k", p.batch, p.seqlen_k, "Tk");
  }
  if (!p.seqlens_k.empty()) {
    if (static_cast<int64_t>(p.seqlens_k.size()) != p.batch) {
      reject("seqlens_k length", str(static_cast<int64_t>(p.seqlens_k.size())), str(p.batch) + " (one per batch)");
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = p.seqlens_k[static_cast<std::size_t>(b)];
      const int64_t limit = p.has_packed_keys() ? p.cu_seqlens_k[static_cast<std::size_t>(b) + 1] -
                                                      p.cu_seqlens_k[static_cast<std::size_t>(b)]
                                                : p.seqlen_k;  // sequence(b).k_capacity, before it is valid
      if (len < 0) reject("seqlens_k[" + str(b) + "]", str(len), "a non-negative key count");
      if (len > limit) {
        reject("seqlens_k[" + str(b) + "]", str(len),
               "at most " + str(limit) +
                   (p.has_packed_keys() ? " (the sequence's packed keys)"
                    : p.is_paged()      ? " (max_pages x page_size of the block table)"
                                        : " (Sk)"));
      }
    }
  }

  if (p.is_paged()) check_paged(p);

  check_strides(p.q_strides, "Q");
  check_strides(p.k_strides, "K");
  check_strides(p.v_strides, "V");
  check_strides(p.o_strides, "O");
  check_strides(p.lse_strides, "LSE");
  for (const auto& [s, name, packed] :
       {std::tuple{&p.q_strides, "Q", p.is_packed()}, std::tuple{&p.k_strides, "K", p.has_packed_keys()},
        std::tuple{&p.v_strides, "V", p.has_packed_keys()}, std::tuple{&p.o_strides, "O", p.is_packed()},
        std::tuple{&p.lse_strides, "LSE", p.is_packed()}}) {
    if (packed && s->batch != 0) reject(std::string(name) + " batch stride", str(s->batch), "0 for packed input");
  }
  const int64_t batches = batches_of(p);
  check_output_strides("O", p.o_strides, batches, p.seqlen_q, p.heads_q, p.head_dim_v);
  // LSE holds one float per row and head: an element axis of size 1.
  check_output_strides("LSE", p.lse_strides, batches, p.seqlen_q, p.heads_q, 1);
  // Every tensor's extent, and its bytes, fits in int64 (extent() checks each
  // step): offsets computed from these strides never wrap.
  for (const auto& [name, elements] :
       {std::pair{"Q", q_extent(p)}, std::pair{"K", k_extent(p)}, std::pair{"V", v_extent(p)},
        std::pair{"O", o_extent(p)}, std::pair{"LSE", lse_extent(p)}}) {
    (void)mul(elements, 4, name, " bytes");
  }
}

void validate(const AttentionProblem& p, const AttentionBuffers& buffers) {
  validate(p);
  validate_buffers(p, buffers);
}

void validate(const AttentionProblem& p, const BackwardBuffers& buffers) {
  validate(p);
  validate_buffers(p, buffers);
}

void validate_buffers(const AttentionProblem& p, const AttentionBuffers& buffers) {
  // A tensor without elements may have no storage at all.
  const std::array<std::tuple<const void*, const char*, int64_t>, 4> required = {{{buffers.q, "Q", q_extent(p)},
                                                                                  {buffers.k, "K", k_extent(p)},
                                                                                  {buffers.v, "V", v_extent(p)},
                                                                                  {buffers.o, "O", o_extent(p)}}};
  for (const auto& [ptr, name, elements] : required) {
    if (ptr == nullptr && elements > 0) reject(std::string(name) + " pointer", "null", "a valid pointer");
  }
  check_modifier_pointers(p, buffers.sinks, buffers.alibi_slopes);
  if (!p.has_fp8() && (buffers.q_descale != nullptr || buffers.k_descale != nullptr || buffers.v_descale != nullptr)) {
    reject("descale pointers", "set for " + std::string(to_string(p.dtype)) + " inputs",
           "q/k/v descales only with fp8 inputs (dtype or kv dtype e4m3 / e5m2)");
  }
  if (!is_fp8(p.dtype) && buffers.q_descale != nullptr) {
    reject("q descale pointer", "set for " + std::string(to_string(p.dtype)) + " queries",
           "a q descale only with fp8 queries (an fp8 KV cache takes k and v descales)");
  }
  const int64_t q_elem = element_bytes(p.dtype);
  const int64_t kv_elem = element_bytes(p.k_dtype());
  const int64_t elem = element_bytes(p.compute_dtype());
  const ByteSpan inputs[] = {span_of("Q", buffers.q, q_extent(p), q_elem),
                             span_of("K", buffers.k, k_extent(p), kv_elem),
                             span_of("V", buffers.v, v_extent(p), kv_elem)};
  const ByteSpan o = span_of("O", buffers.o, o_extent(p), elem);
  const ByteSpan lse =
      span_of("LSE", buffers.lse, buffers.lse != nullptr ? lse_extent(p) : 0, static_cast<int64_t>(sizeof(float)));
  for (const ByteSpan& out : {o, lse}) {
    for (const ByteSpan& in : inputs) {
      if (overlaps(out, in)) {
        reject(std::string("output ") + out.name + " memory", std::string("overlap with input ") + in.name,
               "outputs in memory disjoint from every input");
      }
    }
  }
  if (overlaps(o, lse)) reject("output O memory", "overlap with output LSE", "O and LSE in disjoint memory");
}

void validate_backward(const AttentionProblem& p) {
  if (p.has_fp8()) {
    reject("backward dtype",
           std::string(to_string(p.dtype)) + " Q with " + std::string(to_string(p.k_dtype())) + " K, V",
           "fp16 or bf16 (fp8 is a forward and KV-cache format)");
  }
  if (p.is_paged()) reject("backward K and V", "a paged KV cache", "contiguous K and V [B, Sk, Hkv, D]");
  if (p.is_packed() && !p.has_packed_keys()) {
    reject("backward K and V", "per-sequence keys under packed queries", "packed keys (cu_seqlens_k) too");
  }
}

void validate_buffers(const AttentionProblem& p, const BackwardBuffers& buffers) {
  validate_backward(p);
  check_modifier_pointers(p, buffers.sinks, buffers.alibi_slopes);
  if (p.modifiers.sinks && buffers.dsink == nullptr) {
    reject("dsink pointer", "null", "a float32 [Hq] output for the sinks' gradient");
  }
  const int64_t elem = element_bytes(p.dtype);
  const auto float_bytes = static_cast<int64_t>(sizeof(float));
  const ByteSpan inputs[] = {
      span_of("Q", buffers.q, q_extent(p), elem),    span_of("K", buffers.k, k_extent(p), elem),
      span_of("V", buffers.v, v_extent(p), elem),    span_of("O", buffers.o, o_extent(p), elem),
      span_of("dO", buffers.d_o, o_extent(p), elem), span_of("LSE", buffers.lse, lse_extent(p), float_bytes)};
  const ByteSpan outputs[] = {span_of("dQ", buffers.dq, q_extent(p), elem),
                              span_of("dK", buffers.dk, k_extent(p), elem),
                              span_of("dV", buffers.dv, v_extent(p), elem)};
  // A tensor without elements may have no storage at all.
  for (const auto& spans : {std::span<const ByteSpan>(inputs), std::span<const ByteSpan>(outputs)}) {
    for (const ByteSpan& t : spans) {
      if (t.begin == 0 && t.end > t.begin) reject(std::string(t.name) + " pointer", "null", "a valid pointer");
    }
  }
  const int64_t batches = batches_of(p);
  check_output_strides("dQ", p.q_strides, batches, p.seqlen_q, p.heads_q, p.head_dim_k);
  const int64_t key_batches = key_batches_of(p);
  check_output_strides("dK", p.k_strides, key_batches, p.seqlen_k, p.heads_kv, p.head_dim_k);
  check_output_strides("dV", p.v_strides, key_batches, p.seqlen_k, p.heads_kv, p.head_dim_v);
  for (std::size_t i = 0; i < std::size(outputs); ++i) {
    for (const ByteSpan& in : inputs) {
      if (overlaps(outputs[i], in)) {
        reject(std::string("output ") + outputs[i].name + " memory", std::string("overlap with input ") + in.name,
               "gradients in memory disjoint from every input");
      }
    }
    for (std::size_t j = i + 1; j < std::size(outputs); ++j) {
      if (overlaps(outputs[i], outputs[j])) {
        reject(std::string("output ") + outputs[i].name + " memory",
               std::string("overlap with output ") + outputs[j].name, "dQ, dK and dV in disjoint memory");
      }
    }
  }
}

int64_t tensor_extent(const TensorStrides& strides, int64_t batches, int64_t rows, int64_t heads, int64_t dim) {
  return extent(strides, batches, rows, heads, dim);
}

int64_t q_extent(const AttentionProblem& p) {
  return extent(p.q_strides, batches_of(p), p.seqlen_q, p.heads_q, p.head_dim_k);
}
int64_t k_extent(const AttentionProblem& p) {
  if (p.is_paged()) return extent(p.k_strides, p.num_pages, p.page_size, p.heads_kv, p.head_dim_k);
  return extent(p.k_strides, key_batches_of(p), p.seqlen_k, p.heads_kv, p.head_dim_k);
}
int64_t v_extent(const AttentionProblem& p) {
  if (p.is_paged()) return extent(p.v_strides, p.num_pages, p.page_size, p.heads_kv, p.head_dim_v);
  return extent(p.v_strides, key_batches_of(p), p.seqlen_k, p.heads_kv, p.head_dim_v);
}
int64_t o_extent(const AttentionProblem& p) {
  return extent(p.o_strides, batches_of(p), p.seqlen_q, p.heads_q, p.head_dim_v);
}
int64_t lse_extent(const AttentionProblem& p) { return extent(p.lse_strides, batches_of(p), p.seqlen_q, p.heads_q, 1); }

void validate(const MergeProblem& p, std::span<const void* const> o, std::span<const float* const> lse,
              const void* out_o) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) throw InvalidArgument("merge dtype: expected fp16 or bf16");
  if (p.parts < 1 || p.parts > MergeProblem::kMaxParts) {
    throw InvalidArgument("merge parts: got " + std::to_string(p.parts) + "; expected 1.." +
                          std::to_string(MergeProblem::kMaxParts) + " partial results");
  }
  if (o.size() != static_cast<std::size_t>(p.parts) || lse.size() != static_cast<std::size_t>(p.parts)) {
    throw InvalidArgument("merge inputs: got " + std::to_string(o.size()) + " O and " + std::to_string(lse.size()) +
                          " LSE pointers; expected " + std::to_string(p.parts) + " of each");
  }
  constexpr std::int64_t kInt32Max = 2147483647;
  if (p.rows < 0 || p.rows > kInt32Max) {
    throw InvalidArgument("merge rows: got " + std::to_string(p.rows) + "; expected 0..2^31 - 1");
  }
  if (p.heads < 1 || p.heads > kInt32Max) {
    throw InvalidArgument("merge heads: got " + std::to_string(p.heads) + "; expected >= 1");
  }
  if (p.head_dim < 1 || p.head_dim > kMaxHeadDim) {
    throw InvalidArgument("merge head dim: got " + std::to_string(p.head_dim) + "; expected 1.." +
                          std::to_string(kMaxHeadDim));
  }
  if (p.rows * p.heads > kInt32Max / p.head_dim) {
    throw InvalidArgument("merge size: rows x heads x head_dim = " + std::to_string(p.rows * p.heads * p.head_dim) +
                          "; expected below 2^31");
  }
  if (p.rows == 0) return;
  for (int i = 0; i < p.parts; ++i) {
    const auto at = static_cast<std::size_t>(i);
    if (o[at] == nullptr || lse[at] == nullptr) {
      throw InvalidArgument("merge part " + std::to_string(i) + ": got a null " + (o[at] == nullptr ? "O" : "LSE") +
                            " pointer; expected O [rows, heads, head_dim] and LSE [heads, rows]");
    }
  }
  if (out_o == nullptr) throw InvalidArgument("merge output O: got null; expected [rows, heads, head_dim]");
}

}  // namespace attune
