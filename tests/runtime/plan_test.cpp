// Plans and their runs on the emulator: every op against the fp64 reference
// with the metadata passed as a run's arrays, one plan serving a smaller
// batch, the fixed split size's batch invariance, and the bad runs that are
// rejected before anything launches.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/accuracy.h"
#include "runtime/dispatch/heuristics.h"
#include "runtime/runtime.h"
#include "tests/support/decode_cases.h"
#include "tests/support/emu_backward.h"
#include "tests/support/error_of.h"
#include "tests/support/families.h"

namespace attune {
namespace {

using testing::DecodeCase;
using testing::error_of;

// A problem's host arrays as a run passes them (the emulator's memory is
// the host's).
DeviceMetadata metadata_of(const AttentionProblem& p) {
  const auto data = [](const std::vector<std::int32_t>& v) { return v.empty() ? nullptr : v.data(); };
  return {.cu_seqlens_q = data(p.cu_seqlens_q),
          .cu_seqlens_k = data(p.cu_seqlens_k),
          .seqlens_k = data(p.seqlens_k),
          .block_table = data(p.block_table)};
}

struct Outputs {
  std::vector<std::uint16_t> o;
  std::vector<float> lse;
  std::vector<float> workspace;
};

// Runs a plan made from `in`'s problem, with NaN-filled outputs and workspace.
Outputs run_plan(Runtime& runtime, const Plan& plan, const testing::Inputs& in, DeviceMetadata metadata) {
  const AttentionProblem& p = in.problem;
  Outputs out{std::vector<std::uint16_t>(static_cast<std::size_t>(o_extent(p)), 0xFFFF),
              std::vector<float>(static_cast<std::size_t>(lse_extent(p)), std::numeric_limits<float>::quiet_NaN()),
              std::vector<float>(plan.workspace_bytes() / sizeof(float) + 4, std::numeric_limits<float>::quiet_NaN())};
  runtime.run(plan, {in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data()}, metadata,
              {out.workspace.data(), plan.workspace_bytes()});
  return out;
}

ReferenceOutput as_reference(const AttentionProblem& p, const Outputs& out) {
  ReferenceOutput got;
  for (std::uint16_t bits : out.o) got.o.push_back(bits_to_float(p.dtype, bits));
  got.lse.assign(out.lse.begin(), out.lse.end());
  return got;
}

void expect_matches_reference(const testing::Inputs& in, const Outputs& out, const std::string& what) {
  const AttentionProblem& p = in.problem;
  std::string why;
  EXPECT_TRUE(within_accuracy_rule(as_reference(p, out), reference_forward(p, in.q.data(), in.k.data(), in.v.data()),
                                   naive_storage_attention(p, in.q.data(), in.k.data(), in.v.data()), 2.0, &why))
      << what << ": " << why;
}

// Mixed prefill and decode over a paged cache: sequences with 1, 37 and 5
// query rows against caches of 203, 64 and 9 keys (pages of 16).
DecodeCase varlen_over_paged() { return testing::paged_gqa_case("varlen_over_paged", {203, 64, 9}, {1, 37, 5}); }

TEST(PlanTest, EveryForwardShapeMatchesTheReferenceWithDeviceMetadata) {
  Runtime runtime({.backend = Backend::kEmu});
  for (const testing::Family& family : testing::seed_families()) {
    const testing::Inputs in = testing::make_inputs(family);
    const Plan plan = runtime.plan(in.problem);
    EXPECT_EQ(plan.op(), Op::kForward) << family.name;
    EXPECT_EQ(plan.problem().device_lengths.has_value(),
              in.problem.is_packed() || in.problem.has_seqlens_k() || in.problem.is_paged())
        << family.name;
    expect_matches_reference(in, run_plan(runtime, plan, in, metadata_of(in.problem)), family.name);
  }
}

TEST(PlanTest, VarlenQueriesOverAPagedCacheInOneCall) {
  Runtime runtime({.backend = Backend::kEmu});
  const testing::Inputs in = testing::make_decode_inputs(varlen_over_paged());
  for (const int splits : {1, 3}) {
    const Plan plan = runtime.plan(in.problem, Op::kForward, {.splits = splits});
    EXPECT_EQ(plan.op(), Op::kDecode);  // few query rows and splits: the decode kernel
    EXPECT_EQ(plan.splits(), splits);
    EXPECT_EQ(plan.workspace_bytes() > 0, splits > 1);
    expect_matches_reference(in, run_plan(runtime, plan, in, metadata_of(in.problem)),
                             std::to_string(splits) + " splits");
  }
  // The convenience call plans, passes the host arrays and runs the same.
  Outputs out{std::vector<std::uint16_t>(static_cast<std::size_t>(o_extent(in.problem)), 0xFFFF),
              std::vector<float>(static_cast<std::size_t>(lse_extent(in.problem))),
              {}};
  runtime.forward(in.problem, {in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data()});
  expect_matches_reference(in, out, "Runtime::forward");
}

// Chunked prefill over a paged cache: a sequence bringing 150 query rows
// (at least kPagedForwardRows) beside a decode step; the forward kernel
// reads the pages in place.
DecodeCase long_chunks_over_paged() {
  return testing::paged_gqa_case("long_chunks_over_paged", {203, 64, 160}, {150, 1, 9});
}

TEST(PlanTest, LongQueryChunksOverAPagedCacheRunTheForwardKernel) {
  Runtime runtime({.backend = Backend::kEmu});
  const testing::Inputs in = testing::make_decode_inputs(long_chunks_over_paged());
  const Plan plan = runtime.plan(in.problem);
  EXPECT_EQ(plan.op(), Op::kForward);
  EXPECT_EQ(plan.variant().kernel->id, KernelId::kFlashFwd) << plan.describe();
  EXPECT_EQ(plan.workspace_bytes(), 0U);
  expect_matches_reference(in, run_plan(runtime, plan, in, metadata_of(in.problem)), "forward kernel over pages");
  EXPECT_NE(runtime.explain(in.problem).detail.find("runs the forward kernel"), std::string::npos);
  // Asking for splits plans the decode kernel; both agree with the reference.
  const Plan split = runtime.plan(in.problem, Op::kForward, {.splits = 2});
  EXPECT_EQ(split.op(), Op::kDecode);
  expect_matches_reference(in, run_plan(runtime, split, in, metadata_of(in.problem)), "decode kernel over pages");
  // The plan's bound decides: a step whose sequences bring at most 64 rows
  // plans decode, whatever the lengths of this batch.
  AttentionProblem few = device_lengths_of(in.problem);
  few.device_lengths->max_seqlen_q = 64;
  EXPECT_EQ(runtime.plan(few).op(), Op::kDecode);
  few.device_lengths->max_seqlen_q = kPagedForwardRows;
  EXPECT_EQ(runtime.plan(few).op(), Op::kForward);
  // The convenience call takes the same route.
  Outputs out{std::vector<std::uint16_t>(static_cast<std::size_t>(o_extent(in.problem)), 0xFFFF),
              std::vector<float>(static_cast<std::size_t>(lse_extent(in.problem))),
              {}};
  runtime.forward(in.problem, {in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data()});
  expect_matches_reference(in, out, "Runtime::forward");
}

TEST(PlanTest, APlanWithBoundsServesEveryBatchThatFitsIt) {
  Runtime runtime({.backend = Backend::kEmu});
  DecodeCase big = varlen_over_paged();
  const testing::Inputs step1 = testing::make_decode_inputs(big, 1);
  // The plan's bounds: more than either step needs.
  AttentionProblem shape = device_lengths_of(step1.problem);
  shape.device_lengths->max_seqlen_q = 40;
  shape.device_lengths->max_seqlen_k = shape.seqlen_k;
  const Plan plan = runtime.plan(shape, Op::kDecode, {.splits = 2});
  expect_matches_reference(step1, run_plan(runtime, plan, step1, metadata_of(step1.problem)), "step 1");

  // Step 2: other lengths in tensors of the same shapes, all three
  // sequences, then only the first two on the same plan.
  DecodeCase second = big;
  second.cache_seqlens = {17, 130, 203};
  second.query_lens = {20, 1, 22};
  const testing::Inputs step2 = testing::make_decode_inputs(second, 2);
  ASSERT_EQ(step2.problem.seqlen_q, step1.problem.seqlen_q);
  const Outputs all = run_plan(runtime, plan, step2, metadata_of(step2.problem));
  expect_matches_reference(step2, all, "step 2");
  DeviceMetadata m = metadata_of(step2.problem);
  m.batch = 2;
  const Outputs two = run_plan(runtime, plan, step2, m);
  const std::int64_t rows = 21;  // the first two sequences' query rows
  const std::int64_t row_elems = step2.problem.heads_q * step2.problem.head_dim_v;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(two.o.size()); ++i) {
    ASSERT_EQ(two.o[static_cast<std::size_t>(i)], i < rows * row_elems ? all.o[static_cast<std::size_t>(i)] : 0xFFFF)
        << "O element " << i << (i < rows * row_elems ? " differs from the full batch's" : " was written");
  }
}

TEST(PlanTest, AFixedSplitSizeGivesEachSequenceTheSameBitsInAnyBatch) {
  Runtime runtime({.backend = Backend::kEmu});
  DecodeCase alone{.name = "alone",
                   .batch = 1,
                   .seqlen_q = 1,
                   .heads_q = 4,
                   .heads_kv = 1,
                   .head_dim_k = 64,
                   .head_dim_v = 64,
                   .cache_seqlens = {700},
                   .page_size = 16};
  DecodeCase batch = alone;
  batch.batch = 3;
  batch.cache_seqlens = {700, 2000, 64};
  const testing::Inputs one = testing::make_decode_inputs(alone, 5);
  testing::Inputs three = testing::make_decode_inputs(batch, 5);
  // Sequence 0 of the batch holds the same queries and keys as `one`.
  std::copy(one.q.begin(), one.q.end(), three.q.begin());
  const std::int64_t page_elems = one.problem.page_size * one.problem.heads_kv * one.problem.head_dim_k;
  for (std::int64_t i = 0; i < one.problem.max_pages(); ++i) {
    const auto from = static_cast<std::size_t>(one.problem.block_table[static_cast<std::size_t>(i)] * page_elems);
    const auto to = static_cast<std::size_t>(three.problem.block_table[static_cast<std::size_t>(i)] * page_elems);
    std::copy_n(one.k.begin() + static_cast<std::ptrdiff_t>(from), page_elems,
                three.k.begin() + static_cast<std::ptrdiff_t>(to));
    std::copy_n(one.v.begin() + static_cast<std::ptrdiff_t>(from), page_elems,
                three.v.begin() + static_cast<std::ptrdiff_t>(to));
  }
  const Variant variant = runtime.explain_decode(three.problem).variant;
  const Plan p1 = runtime.plan_variant(variant, one.problem, {.split_size = 256});
  const Plan p3 = runtime.plan_variant(variant, three.problem, {.split_size = 256});
  EXPECT_LT(p1.splits(), p3.splits());  // the longer cache needs more splits of the same size
  const Outputs a = run_plan(runtime, p1, one, metadata_of(one.problem));
  const Outputs b = run_plan(runtime, p3, three, metadata_of(three.problem));
  const std::size_t row = static_cast<std::size_t>(one.problem.heads_q * one.problem.head_dim_v);
  ASSERT_EQ(a.o.size(), row);
  EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), row * sizeof(std::uint16_t)), 0) << "sequence 0 changed with the batch";
  expect_matches_reference(three, b, "fixed split size");
  EXPECT_NE(error_of([&] {
              (void)runtime.plan_variant(variant, one.problem, {.splits = 2, .split_size = 256});
            }).find("expected one of the two"),
            std::string::npos);
}

TEST(PlanTest, BackwardPlansTakeTheCallersWorkspace) {
  Runtime runtime({.backend = Backend::kEmu});
  for (const testing::Family& family : testing::seed_families()) {
    const testing::BackwardInputs in = testing::make_backward_inputs(family);
    const AttentionProblem& p = in.forward.problem;
    const Plan plan = runtime.plan(p, Op::kBackward);
    ASSERT_GT(plan.workspace_bytes(), 0U);
    testing::StoredGradients got{std::vector<std::uint16_t>(static_cast<std::size_t>(q_extent(p)), 0xFFFF),
                                 std::vector<std::uint16_t>(static_cast<std::size_t>(k_extent(p)), 0xFFFF),
                                 std::vector<std::uint16_t>(static_cast<std::size_t>(v_extent(p)), 0xFFFF)};
    std::vector<float> workspace(plan.workspace_bytes() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
    const BackwardBuffers buffers{in.forward.q.data(), in.forward.k.data(), in.forward.v.data(),
                                  in.o.data(),         in.d_o.data(),       in.lse.data(),
                                  got.dq.data(),       got.dk.data(),       got.dv.data()};
    runtime.run_backward(plan, buffers, metadata_of(p), {workspace.data(), plan.workspace_bytes()});
    // The same kernels as one emulate_backward call: the same bits.
    EXPECT_TRUE(got == testing::run_backward_bits(in, plan.variant())) << family.name;
    // Forward buffers on a backward plan are refused.
    EXPECT_NE(error_of([&] {
                runtime.run(plan, AttentionBuffers{in.forward.q.data(), in.forward.k.data(), in.forward.v.data(),
                                                   got.dq.data()});
              }).find("expected run_backward (BackwardBuffers)"),
              std::string::npos);
  }
}

TEST(PlanTest, BadRunsAreRejectedWithWhatWasExpectedAndLaunchNothing) {
  Runtime runtime({.backend = Backend::kEmu});
  const testing::Inputs in = testing::make_decode_inputs(varlen_over_paged());
  const Plan plan = runtime.plan(in.problem, Op::kDecode, {.splits = 4});
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(in.problem)), 0xFFFF);
  std::vector<float> workspace(plan.workspace_bytes() / sizeof(float) + 1);
  const AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data()};
  const DeviceMetadata good = metadata_of(in.problem);
  const Workspace enough{workspace.data(), plan.workspace_bytes()};
  const auto rejected = [&](const DeviceMetadata& m, Workspace w) {
    return error_of([&] { runtime.run(plan, buffers, m, w); });
  };
  DeviceMetadata bigger = good;
  bigger.batch = 4;
  EXPECT_NE(rejected(bigger, enough).find("run batch: got 4 sequences; expected 0..3 (the plan's batch)"),
            std::string::npos);
  EXPECT_NE(rejected(good, {workspace.data(), plan.workspace_bytes() - 4})
                .find("expected at least " + std::to_string(plan.workspace_bytes()) + " bytes"),
            std::string::npos);
  EXPECT_NE(rejected(good, {}).find("workspace: got 0 bytes (null)"), std::string::npos);
  for (const char* name : {"cu_seqlens_q", "seqlens_k", "block_table"}) {
    DeviceMetadata missing = good;
    if (std::string(name) == "cu_seqlens_q") missing.cu_seqlens_q = nullptr;
    if (std::string(name) == "seqlens_k") missing.seqlens_k = nullptr;
    if (std::string(name) == "block_table") missing.block_table = nullptr;
    EXPECT_NE(rejected(missing, enough).find(std::string("metadata ") + name + ": got null; expected"),
              std::string::npos)
        << name;
  }
  EXPECT_NE(error_of([&] { runtime.run(Plan{}, buffers); }).find("plan: empty"), std::string::npos);
  Runtime other({.backend = Backend::kEmu});
  EXPECT_NE(error_of([&] { other.run(plan, buffers, good, enough); }).find("made by another runtime"),
            std::string::npos);
  for (std::uint16_t bits : o) ASSERT_EQ(bits, 0xFFFF) << "a rejected run wrote O";
}

// Attention over keys [0, Sk) as the merge of attention over two disjoint
// key ranges, one of them empty for some rows (a causal mask over the first
// part), and a third partial with no keys at all.
TEST(MergeStatesTest, PartialsOverDisjointKeysMergeToTheWholeAndEmptyOnesAreSkipped) {
  Runtime runtime({.backend = Backend::kEmu});
  const std::int64_t sq = 9;
  const std::int64_t heads = 3;
  const std::int64_t dim = 40;
  const std::int64_t split = 16;
  const std::int64_t sk = 41;
  std::mt19937 rng(7);
  const std::vector<std::int64_t> q_shape = {1, sq, heads, dim};
  const AttentionProblem whole = make_problem(q_shape, std::vector<std::int64_t>{1, sk, heads, dim},
                                              std::vector<std::int64_t>{1, sk, heads, dim}, {});
  const std::vector<std::uint16_t> q = testing::random_bits(q_extent(whole), whole.dtype, 0.0F, 1.0F, rng);
  const std::vector<std::uint16_t> k = testing::random_bits(k_extent(whole), whole.dtype, 0.0F, 1.0F, rng);
  const std::vector<std::uint16_t> v = testing::random_bits(v_extent(whole), whole.dtype, 0.0F, 1.0F, rng);
  // The partials: keys [0, split) and [split, sk), from the reference, O
  // rounded to the storage dtype as a kernel would store it.
  std::vector<std::vector<std::uint16_t>> part_o;
  std::vector<std::vector<float>> part_lse;
  for (const auto& [begin, end] : {std::pair{std::int64_t{0}, split}, std::pair{split, sk}}) {
    const std::vector<std::int64_t> kv = {1, end - begin, heads, dim};
    const AttentionProblem part = make_problem(q_shape, kv, kv, {});
    const std::ptrdiff_t from = begin * heads * dim;
    const std::ptrdiff_t to = end * heads * dim;
    const std::vector<std::uint16_t> pk(k.begin() + from, k.begin() + to);
    const std::vector<std::uint16_t> pv(v.begin() + from, v.begin() + to);
    const ReferenceOutput r = reference_forward(part, q.data(), pk.data(), pv.data());
    part_o.emplace_back();
    for (double x : r.o) part_o.back().push_back(float_to_bits(whole.dtype, static_cast<float>(x)));
    part_lse.emplace_back(r.lse.begin(), r.lse.end());
  }
  // A third partial without keys: O garbage, LSE -inf, skipped.
  part_o.emplace_back(part_o[0].size(), 0x7FC0);
  part_lse.emplace_back(part_lse[0].size(), -std::numeric_limits<float>::infinity());
  const std::vector<const void*> o = {part_o[0].data(), part_o[2].data(), part_o[1].data()};
  const std::vector<const float*> lse = {part_lse[0].data(), part_lse[2].data(), part_lse[1].data()};
  std::vector<std::uint16_t> out(part_o[0].size(), 0xFFFF);
  std::vector<float> out_lse(part_lse[0].size(), std::numeric_limits<float>::quiet_NaN());
  const MergeProblem merge{.dtype = whole.dtype, .rows = sq, .heads = heads, .head_dim = dim, .parts = 3};
  runtime.merge_states(merge, o, lse, out.data(), out_lse.data());
  Outputs got{out, out_lse, {}};
  const testing::Inputs in{whole, q, k, v};
  expect_matches_reference(in, got, "merged partials");

  // Every partial empty: O = 0 and LSE = -inf.
  const std::vector<const float*> empty = {part_lse[2].data(), part_lse[2].data()};
  const std::vector<const void*> empty_o = {part_o[2].data(), part_o[2].data()};
  runtime.merge_states({.dtype = whole.dtype, .rows = sq, .heads = heads, .head_dim = dim, .parts = 2}, empty_o, empty,
                       out.data(), out_lse.data());
  for (std::uint16_t bits : out) ASSERT_EQ(bits_to_float(whole.dtype, bits), 0.0F);
  for (float x : out_lse) ASSERT_EQ(x, -std::numeric_limits<float>::infinity());

  // Bad merges say what was expected.
  EXPECT_NE(error_of([&] {
              runtime.merge_states({.rows = sq, .heads = heads, .head_dim = dim, .parts = 17}, o, lse, out.data(),
                                   nullptr);
            }).find("merge parts: got 17; expected 1..16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              runtime.merge_states({.rows = sq, .heads = heads, .head_dim = 300, .parts = 3}, o, lse, out.data(),
                                   nullptr);
            }).find("merge head dim: got 300; expected 1..256"),
            std::string::npos);
  const std::vector<const float*> missing = {lse[0], nullptr, lse[2]};
  EXPECT_NE(error_of([&] {
              runtime.merge_states(merge, o, missing, out.data(), nullptr);
            }).find("merge part 1: got a null LSE pointer"),
            std::string::npos);
}

TEST(PlanTest, PlanBoundsAreCheckedAgainstTheTensors) {
  Runtime runtime({.backend = Backend::kEmu});
  AttentionProblem shape = device_lengths_of(testing::make_decode_inputs(varlen_over_paged()).problem);
  shape.device_lengths->max_seqlen_q = shape.seqlen_q + 1;
  EXPECT_NE(error_of([&] { (void)runtime.plan(shape); }).find("device lengths max_seqlen_q: got "), std::string::npos);
  shape.device_lengths->max_seqlen_q = 1;
  shape.seqlens_k = {1, 2, 3};
  EXPECT_NE(error_of([&] { (void)runtime.plan(shape); }).find("host arrays with device lengths"), std::string::npos);
}

}  // namespace
}  // namespace attune
