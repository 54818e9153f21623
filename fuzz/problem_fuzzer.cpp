// Problem construction and validation from arbitrary sizes, strides,
// lengths, cu_seqlens, block tables and masks, through the C API's struct
// (runtime/c_problem.h) and through make_problem (core/problem.h).
// Invariants: an accepted problem validates again, its extents are sane, and
// it is safe to hand to the fp64 reference (AddressSanitizer watches every
// element the reference reads through the problem's strides and tables).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/problem_key.h"
#include "fuzz/fuzz_support.h"
#include "reference/reference.h"
#include "runtime/c_problem.h"

using namespace attune;

namespace {

// Mostly small sizes, sometimes anything: the edges are where bugs live.
int64_t size_value(FuzzedDataProvider& in, int64_t small_max) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeIntegral<int64_t>();
    case 1:
      return in.ConsumeIntegralInRange<int64_t>(-3, 3);
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, small_max);
  }
}

std::vector<int32_t> lengths(FuzzedDataProvider& in, int64_t count) {
  std::vector<int32_t> out;
  int32_t running = 0;
  const bool increasing = in.ConsumeBool();
  for (int64_t i = 0; i < count; ++i) {
    if (increasing) {
      running += in.ConsumeIntegralInRange<int32_t>(0, 24);
      out.push_back(running);
    } else {
      out.push_back(static_cast<int32_t>(size_value(in, 40)));
    }
  }
  return out;
}

void fill_strides(FuzzedDataProvider& in, int64_t (&s)[3]) {
  if (!in.ConsumeBool()) return;  // zero: contiguous
  for (int64_t& x : s) x = size_value(in, 4096);
}

// The C struct, with arrays only as long as the struct says (the C contract).
struct CProblem {
  attune_problem c{};
  std::vector<int32_t> seqlens_k, cu_q, cu_k, table;
};

void build_c(FuzzedDataProvider& in, CProblem& out) {
  attune_problem& c = out.c;
  c.dtype = static_cast<attune_dtype>(in.ConsumeIntegralInRange<int>(-1, 2));
  c.batch = size_value(in, 4);
  c.seqlen_q = size_value(in, 40);
  c.seqlen_k = size_value(in, 40);
  c.heads_q = size_value(in, 4);
  c.heads_kv = size_value(in, 4);
  c.head_dim_k = size_value(in, 40);
  c.head_dim_v = size_value(in, 40);
  c.scale = in.ConsumeBool() ? 0.0 : in.ConsumeFloatingPoint<double>();
  c.mask = static_cast<attune_mask>(in.ConsumeIntegralInRange<int>(-1, 4));
  c.window_left = size_value(in, 40);
  c.window_right = size_value(in, 40);
  const bool small_batch = c.batch >= 0 && c.batch <= 8;
  if (small_batch && in.ConsumeBool()) {
    out.seqlens_k = lengths(in, c.batch);
    c.seqlens_k = out.seqlens_k.data();
  }
  if (small_batch && in.ConsumeBool()) {
    out.cu_q = lengths(in, c.batch + 1);
    out.cu_k = lengths(in, c.batch + 1);
    c.cu_seqlens_q = out.cu_q.data();
    c.cu_seqlens_k = out.cu_k.data();
  }
  fill_strides(in, c.q_strides);
  fill_strides(in, c.k_strides);
  fill_strides(in, c.v_strides);
  fill_strides(in, c.o_strides);
  fill_strides(in, c.lse_strides);
  if (small_batch && in.ConsumeBool()) {
    c.max_pages = in.ConsumeIntegralInRange<int64_t>(0, 6);
    c.page_size = size_value(in, 16);
    c.num_pages = size_value(in, 12);
    out.table.resize(static_cast<std::size_t>(c.batch * c.max_pages));
    for (int32_t& t : out.table) t = static_cast<int32_t>(size_value(in, 12));
    c.block_table = out.table.data();
  }
}

AttentionProblem build_cpp(FuzzedDataProvider& in) {
  const auto shape = [&] {
    std::vector<int64_t> s(in.ConsumeIntegralInRange<std::size_t>(0, 5));
    for (int64_t& x : s) x = size_value(in, 40);
    return s;
  };
  const std::vector<int64_t> q = shape(), k = shape(), v = shape();
  ProblemOptions o;
  o.dtype = in.ConsumeBool() ? DType::kBF16 : DType::kF16;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 1:
      o.mask = Mask::causal_bottom_right();
      break;
    case 2:
      o.mask = Mask::causal_top_left();
      break;
    case 3:
      o.mask = Mask::window(size_value(in, 40), size_value(in, 40));
      break;
    default:
      break;
  }
  if (in.ConsumeBool()) o.scale = in.ConsumeFloatingPoint<double>();
  const int64_t batch = q.size() == 4 ? q[0] : (q.size() == 3 ? in.ConsumeIntegralInRange<int64_t>(0, 8) : 1);
  const bool small = batch >= 0 && batch <= 8;
  if (small && in.ConsumeBool()) o.seqlens_k = lengths(in, in.ConsumeBool() ? batch : in.ConsumeIntegralInRange(0, 9));
  if (small && in.ConsumeBool()) {
    o.cu_seqlens_q = lengths(in, batch + 1);
    o.cu_seqlens_k = lengths(in, in.ConsumeBool() ? batch + 1 : in.ConsumeIntegralInRange(0, 10));
  }
  if (in.ConsumeBool()) {
    o.page_size = size_value(in, 16);
    o.block_table = lengths(in, in.ConsumeIntegralInRange(0, 24));
  }
  return make_problem(q, k, v, o);
}

// A finite input in the storage dtype: small values from a counter.
std::vector<std::uint16_t> tensor(int64_t elements, std::uint16_t seed) {
  std::vector<std::uint16_t> t(static_cast<std::size_t>(elements));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::uint16_t>(0x3C00 + ((i * 7 + seed) % 64));
  return t;
}

void check_accepted(const AttentionProblem& p) {
  validate(p);  // accepted once, accepted again
  const int64_t qe = q_extent(p), ke = k_extent(p), ve = v_extent(p), oe = o_extent(p), le = lse_extent(p);
  fuzz::check(qe >= 0 && ke >= 0 && ve >= 0 && oe >= 0 && le >= 0, "negative extent");
  for (Op op : {Op::kForward, Op::kDecode, Op::kBackward}) (void)problem_key(op, p);
  const double pairs = visible_pairs(p);
  fuzz::check(pairs >= 0 && std::isfinite(pairs), "visible pairs");
  // The reference only where it is cheap: the point is its memory accesses.
  constexpr int64_t kMaxElements = 1 << 15;
  if (qe > kMaxElements || ke > kMaxElements || ve > kMaxElements ||
      pairs * static_cast<double>(p.heads_q) * static_cast<double>(p.head_dim_k + p.head_dim_v) > 1e6) {
    return;
  }
  const std::vector<std::uint16_t> q = tensor(qe, 1), k = tensor(ke, 2), v = tensor(ve, 3);
  ReferenceOutput out;
  if (p.is_paged()) {
    const UnpagedKv unpaged = unpage_kv(p, k.data(), v.data());
    out = reference_forward(unpaged.problem, q.data(), unpaged.k.data(), unpaged.v.data());
  } else {
    out = reference_forward(p, q.data(), k.data(), v.data());
  }
  for (double x : out.o) {
    if (!std::isfinite(x)) {
      std::fprintf(
          stderr,
          "problem: B %ld Sq %ld Sk %ld Hq %ld Hkv %ld Dk %ld Dv %ld scale %g mask %d (%ld, %ld) packed %d paged %d\n",
          static_cast<long>(p.batch), static_cast<long>(p.seqlen_q), static_cast<long>(p.seqlen_k),
          static_cast<long>(p.heads_q), static_cast<long>(p.heads_kv), static_cast<long>(p.head_dim_k),
          static_cast<long>(p.head_dim_v), p.softmax_scale(), static_cast<int>(p.mask.kind),
          static_cast<long>(p.mask.window_left), static_cast<long>(p.mask.window_right),
          static_cast<int>(p.is_packed()), static_cast<int>(p.is_paged()));
      fuzz::check(false, "reference output not finite on finite inputs");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  AttentionProblem problem;
  try {
    if (in.ConsumeBool()) {
      CProblem c;
      build_c(in, c);
      problem = problem_from_c(c.c);
      validate(problem);  // as every C entry point's runtime call does
    } else {
      problem = build_cpp(in);
    }
  } catch (const InvalidArgument&) {
    return 0;
  }
  check_accepted(problem);
  return 0;
}
