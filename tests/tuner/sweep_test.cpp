// Sweep planning (axes, sweep files, shards) and the tuning loop on the
// emulator: every task recorded once, a second run measures nothing.
#include "tuner/sweep.h"
#include "runtime/dispatch/heuristics.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/dispatch/tuned_id.h"
#include "runtime/jit/kernel_cache.h"
#include "tests/support/error_of.h"
#include "tests/tuner/emu_tuning.h"
#include "tuner/gains.h"
#include "tuner/tuner.h"

namespace attune::tuner {
namespace {

// A sweep spec from (axis, values) pairs, as a sweep file or the flags give
// them, and its max_variants (0: all).
SweepSpec spec_of(std::initializer_list<std::pair<const char*, const char*>> axes, int max_variants = 0) {
  SweepSpec spec;
  for (const auto& [axis, values] : axes) set_axis(spec, axis, values);
  spec.max_variants = max_variants;
  return spec;
}

namespace fs = std::filesystem;

TEST(SweepTest, AxesParseAndRejectBadValues) {
  SweepSpec spec = spec_of({{"dtypes", "bf16, fp16"},
                            {"head_dims", "64,128"},
                            {"masks", "none,causal"},
                            {"seqlens", "128, 1024"},
                            {"batch_heads", "1x8, 4x16"}});
  EXPECT_EQ(spec.dtypes, (std::vector<DType>{DType::kBF16, DType::kF16}));
  EXPECT_EQ(spec.masks[1], Mask::causal_bottom_right());
  EXPECT_EQ(spec.batch_heads[1], (std::pair<std::int64_t, std::int64_t>{4, 16}));
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "dtypes", "fp8"); }).find("dtypes: got 'fp8'"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "head_dims", "300"); }).find("expected 1..256"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "batch_heads", "8"); }).find("expected BxH"), std::string::npos);
  // A product past int32 (found by fuzz.sweep_fuzzer) is refused, not overflowed.
  EXPECT_NE(testing::error_of([&] {
              set_axis(spec, "batch_heads", "4x8868888888888888884");
            }).find("expected B x H below 2^31"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "seqlens", "-4"); }).find("positive integer"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "colour", "red"); }).find("sweep axis: got 'colour'"),
            std::string::npos);
}

TEST(SweepTest, SweepFileWithCommentsAndLineNumbersInErrors) {
  const fs::path path = fs::temp_directory_path() / ("attune_sweep_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(path);
    out << "# a sweep\nhead_dims = 32   # small\n\nseqlens = 64, 96\nmax_variants = 3\n";
  }
  const SweepSpec spec = read_sweep_file(path);
  EXPECT_EQ(spec.head_dims, std::vector<int>{32});
  EXPECT_EQ(spec.seqlens, (std::vector<std::int64_t>{64, 96}));
  EXPECT_EQ(spec.max_variants, 3);
  {
    std::ofstream out(path);
    out << "head_dims = 32\nseqlens 64\n";
  }
  EXPECT_NE(testing::error_of([&] { read_sweep_file(path); }).find(":2: got 'seqlens 64'"), std::string::npos);
  fs::remove(path);
  EXPECT_NE(testing::error_of([&] { read_sweep_file(path); }).find("cannot read"), std::string::npos);
}

TEST(SweepTest, ShardsPartitionTheTasks) {
  SweepSpec spec = spec_of({{"head_dims", "32,64"}, {"masks", "none,causal"}});
  const ArchLimits arch = require_arch("sm_90a");
  const std::vector<Task> all = plan(spec, arch);
  // A task: its variant on its problem (head dims 32 and 64 share the
  // Hopper family's d64 variants).
  const auto key = [](const Task& t) {
    return t.variant.id() + "|" + std::to_string(t.problem.head_dim_k) + "|" +
           std::string(to_string(t.problem.mask.kind));
  };
  std::multiset<std::string> seen;
  for (int k = 0; k < 3; ++k) {
    for (const Task& t : plan(spec, arch, {k, 3})) {
      seen.insert(key(t));
    }
  }
  EXPECT_EQ(seen.size(), all.size());
  for (const Task& t : all) EXPECT_EQ(seen.count(key(t)), 1U) << key(t);
  EXPECT_EQ(parse_shard("2/5").index, 2);
  EXPECT_NE(testing::error_of([] { parse_shard("5/5"); }).find("0 <= K < N"), std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_shard("1"); }).find("expected K/N"), std::string::npos);
}

TEST(SweepTest, MaxVariantsKeepsTheHeuristic) {
  const SweepSpec spec = spec_of({{"head_dims", "128"}}, 3);
  const ArchLimits arch = require_arch("sm_90a");
  const std::vector<Task> tasks = plan(spec, arch);
  EXPECT_EQ(tasks.size(), 3U);
  const Variant heuristic = heuristic_variant("fwd", DType::kBF16, 128, 128, arch);
  EXPECT_TRUE(std::any_of(tasks.begin(), tasks.end(), [&](const Task& t) { return t.variant == heuristic; }));
}

TEST(SweepTest, FlopsCountVisiblePairs) {
  const auto problem = [](Mask mask) {
    return make_problem(std::vector<std::int64_t>{2, 100, 4, 64}, std::vector<std::int64_t>{2, 100, 4, 64},
                        std::vector<std::int64_t>{2, 100, 4, 64}, {.mask = mask});
  };
  EXPECT_DOUBLE_EQ(forward_flops(problem(Mask::none())), 4.0 * 2 * 4 * 64 * 100 * 100);
  EXPECT_DOUBLE_EQ(forward_flops(problem(Mask::causal_bottom_right())), 4.0 * 2 * 4 * 64 * (100 * 101 / 2));
}

TEST(TunerTest, SweepOnTheEmulatorRecordsEachTaskOnce) {
  testing::EmuTuning emu("attune_tuner");
  const std::vector<Task> tasks =
      plan(spec_of({{"head_dims", "32"}, {"seqlens", "48"}, {"masks", "none,causal"}}, 2), emu.runtime.arch());
  ASSERT_EQ(tasks.size(), 4U);
  std::size_t progress_calls = 0;
  emu.sweep_once(tasks, {.measured = 4, .failed = 0}, [&](const Progress&) { ++progress_calls; });
  EXPECT_EQ(progress_calls, 4U);
  const TuneSummary second = run_sweep(tasks, emu.runtime, emu.db, {.repetitions = 1});
  EXPECT_EQ(second.skipped, 4U);
  EXPECT_EQ(second.measured, 0U);
  EXPECT_EQ(emu.db.best_for_device(kEmulatorDeviceKey).size(), 2U);  // one per mask
  EXPECT_TRUE(emu.db.verify().ok());
}

TEST(TunerTest, PrecompileFillsTheKernelCacheInParallel) {
  const fs::path dir = fs::temp_directory_path() / ("attune_precompile_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SweepSpec spec = spec_of({{"head_dims", "64"}}, 3);
  set_axis(spec, "masks", "none,causal");  // the same variants twice: compiled once
  const std::vector<Task> tasks = plan(spec, require_arch("sm_90a"));
  ASSERT_EQ(tasks.size(), 6U);
  EXPECT_EQ(precompile(tasks, "sm_90a", dir, 2), 0U);
  EXPECT_EQ(KernelCache({.directory = dir}).disk_entries(), 3U);
  fs::remove_all(dir);
}

TEST(SweepTest, DecodeAxesAndSplitCounts) {
  SweepSpec spec = spec_of({{"op", "decode"},
                            {"head_dims", "64"},
                            {"seqlens", "1000"},
                            {"batch_heads", "1x2"},
                            {"gqa", "4"},
                            {"queries", "1,3"},
                            {"splits", "1,4,4,auto"}},
                           2);
  const std::vector<Task> tasks = plan(spec, require_arch("sm_90a"), {}, 132);
  std::set<std::string> ids;
  for (const Task& t : tasks) {
    EXPECT_EQ(t.problem.heads_q, 8);
    EXPECT_EQ(t.problem.heads_kv, 2);
    EXPECT_EQ(t.problem.seqlen_k, 1000);
    EXPECT_GE(t.splits, 1);
    EXPECT_EQ(task_op(t), Op::kDecode);
    EXPECT_TRUE(ids.insert(std::to_string(t.problem.seqlen_q) + " " + task_variant_id(t)).second)
        << "measured twice: " << task_variant_id(t);
  }
  // 2 query counts x 2 variants x (1, 4 and the heuristic's count, unless it is 1 or 4).
  EXPECT_GE(tasks.size(), 2U * 2U * 2U);
  EXPECT_LE(tasks.size(), 2U * 2U * 3U);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "splits", "300"); }).find("expected 1..256 or auto"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "op", "backward"); }).find("expected fwd, bwd or decode"),
            std::string::npos);
}

TEST(TunerTest, DecodeSweepOnTheEmulatorIsDispatchedFromTheDatabase) {
  testing::EmuTuning emu("attune_decode_tuner");
  const SweepSpec spec = spec_of({{"op", "decode"},
                                  {"head_dims", "32"},
                                  {"seqlens", "600"},
                                  {"batch_heads", "1x1"},
                                  {"gqa", "4"},
                                  {"splits", "1,3"}},
                                 2);
  const std::vector<Task> tasks = plan(spec, emu.runtime.arch(), {}, emu.runtime.sm_count());
  ASSERT_EQ(tasks.size(), 4U);
  emu.sweep_once(tasks, {.measured = 4, .failed = 0});
  const auto best = emu.db.best_for_device(kEmulatorDeviceKey);
  ASSERT_EQ(best.size(), 1U);
  EXPECT_EQ(best[0].key.op, Op::kDecode);
  EXPECT_NE(best[0].variant_id.find("/splits"), std::string::npos) << best[0].variant_id;

  const DbTunedSource source(emu.db);
  Runtime tuned({.backend = Backend::kEmu, .tuned = &source});
  const DecodeChoice choice = tuned.explain_decode(tasks[0].problem);
  EXPECT_EQ(tuned_id(choice.variant, choice.splits), best[0].variant_id) << choice.reason;
  EXPECT_EQ(choice.reason.rfind("tuned", 0), 0U) << choice.reason;
}

TEST(SweepTest, ModifierAxesParseAnyOrderAndRejectBadValues) {
  SweepSpec spec;
  EXPECT_EQ(spec.modifiers, std::vector<std::uint8_t>{0});  // default: none
  EXPECT_EQ(spec.softcap, 30);
  set_axis(spec, "modifiers", "none, alibi+softcap, sinks, softcap+alibi");  // the last is the second again
  EXPECT_EQ(spec.modifiers, (std::vector<std::uint8_t>{0, kModSoftcap | kModAlibi, kModSinks}));
  set_axis(spec, "softcap", "12.5");
  EXPECT_EQ(spec.softcap, 12.5);
  for (const char* bad : {"tanh", "softcap+softcap", "softcap+", "none+sinks"}) {
    EXPECT_NE(testing::error_of([&] { set_axis(spec, "modifiers", bad); }).find("modifiers: got '" + std::string(bad)),
              std::string::npos)
        << bad;
  }
  for (const char* bad : {"0", "-3", "inf", "nan", "30x", "10, 20"}) {
    EXPECT_NE(testing::error_of([&] { set_axis(spec, "softcap", bad); }).find("expected one positive number"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(spec.softcap, 12.5);
}

TEST(SweepTest, SweepFileModifierAxes) {
  const fs::path path = fs::temp_directory_path() / ("attune_sweep_mods_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(path);
    out << "modifiers = none, sinks+softcap   # two keys\nsoftcap = 50\n";
  }
  const SweepSpec spec = read_sweep_file(path);
  fs::remove(path);
  EXPECT_EQ(spec.modifiers, (std::vector<std::uint8_t>{0, kModSoftcap | kModSinks}));
  EXPECT_EQ(spec.softcap, 50);
}

// Every task of a set carries the set: its problem has the modifiers (c as
// the sweep says, ALiBi slopes per head), its variant compiles in those its
// kernel has (`compiled`: flash_bwd's sinks live in the LSE and the dsink
// kernel), and its key is a key of its own.
void expect_modifier_sets(const char* op, const std::vector<Task>& tasks, std::size_t per_set,
                          const std::string& compiled) {
  std::map<std::uint8_t, std::size_t> count;
  std::set<std::string> keys;
  for (const Task& t : tasks) {
    const std::uint8_t bits = modifier_bits(t.problem.modifiers);
    ++count[bits];
    EXPECT_EQ(t.variant.modifiers, bits & supported_modifiers(*t.variant.kernel)) << op << " " << t.variant.id();
    EXPECT_NO_THROW(check_variant_modifiers(t.variant, bits)) << t.variant.id();
    const ProblemKey key = problem_key(task_op(t), t.problem);
    EXPECT_EQ(key.modifiers, bits);
    keys.insert(key.to_string());
    if (bits == 0) {
      EXPECT_EQ(t.variant.modifiers, 0) << t.variant.id();
      EXPECT_FALSE(t.problem.modifiers.any());
      continue;
    }
    EXPECT_TRUE(t.variant.id().ends_with(compiled)) << t.variant.id();
    EXPECT_EQ(t.problem.modifiers.softcap, 24);
    EXPECT_TRUE(t.problem.modifiers.sinks);
    EXPECT_EQ(t.problem.modifiers.alibi, AlibiSlopes::kPerHead);
    EXPECT_TRUE(key.to_string().ends_with("/softcap+sinks+alibi")) << key.to_string();
  }
  EXPECT_EQ(count[0], per_set) << op;
  EXPECT_EQ(count[kModAll], per_set) << op;
  EXPECT_EQ(keys.size(), 2U) << op;
}

TEST(SweepTest, PlanCarriesTheModifierSetsIntoProblemsAndVariants) {
  const ArchLimits arch = require_arch("sm_90a");
  SweepSpec spec = spec_of({{"head_dims", "64"}, {"modifiers", "none, softcap+sinks+alibi"}, {"softcap", "24"}}, 3);
  for (const char* op : {"fwd", "bwd"}) {
    set_axis(spec, "op", op);
    const std::vector<Task> tasks = plan(spec, arch);
    ASSERT_EQ(tasks.size(), 6U) << op;
    expect_modifier_sets(op, tasks, 3, op == std::string("fwd") ? ".softcap1.sinks1.alibi1" : ".softcap1.alibi1");
    // The heuristic default of each set is among its candidates.
    const Variant heuristic = heuristic_variant(op, DType::kBF16, 64, 64, arch, kModAll);
    EXPECT_TRUE(std::any_of(tasks.begin(), tasks.end(), [&](const Task& t) { return t.variant == heuristic; })) << op;
  }
  set_axis(spec, "op", "decode");
  set_axis(spec, "seqlens", "1000");
  set_axis(spec, "gqa", "4");
  set_axis(spec, "splits", "2");
  spec.max_variants = 2;
  const std::vector<Task> tasks = plan(spec, arch);
  ASSERT_EQ(tasks.size(), 4U);
  expect_modifier_sets("decode", tasks, 2, ".softcap1.sinks1.alibi1");
  const AttentionProblem& with = tasks.back().problem;
  EXPECT_TRUE(std::any_of(tasks.begin(), tasks.end(),
                          [&](const Task& t) { return t.variant == heuristic_decode_variant(with, arch); }));
}

TEST(TunerTest, ModifierSetsAreTunedUnderTheirOwnKeysAndDispatched) {
  testing::EmuTuning emu("attune_mods_tuner");
  SweepSpec spec = spec_of({{"head_dims", "32"}, {"seqlens", "48"}, {"modifiers", "none,softcap+sinks+alibi"}}, 2);
  const std::vector<Task> tasks = plan(spec, emu.runtime.arch());
  ASSERT_EQ(tasks.size(), 4U);
  emu.sweep_once(tasks, {.measured = 4, .failed = 0});
  ASSERT_EQ(emu.db.best_for_device(kEmulatorDeviceKey).size(), 2U);  // one per modifier set
  const DbTunedSource source(emu.db);
  const Runtime tuned({.backend = Backend::kEmu, .tuned = &source});
  for (const Task& t : {tasks.front(), tasks.back()}) {
    const DispatchChoice choice = tuned.explain(t.problem);
    EXPECT_EQ(choice.rule, DispatchRule::kTuned) << choice.detail;
    EXPECT_EQ(choice.variant.modifiers, modifier_bits(t.problem.modifiers)) << choice.variant.id();
  }

  // Decode too; and each key's gain is over its own set's default (measured: the sweep always has it).
  set_axis(spec, "op", "decode");
  set_axis(spec, "seqlens", "300");
  set_axis(spec, "batch_heads", "1x1");
  set_axis(spec, "gqa", "4");
  set_axis(spec, "splits", "auto");
  EXPECT_EQ(
      run_sweep(plan(spec, emu.runtime.arch(), {}, emu.runtime.sm_count()), emu.runtime, emu.db, {.repetitions = 1})
          .failed,
      0U);
  const auto all = emu.db.best_for_device(kEmulatorDeviceKey);
  ASSERT_EQ(all.size(), 4U);
  for (const tuning_db::BestRow& row : all) {
    EXPECT_TRUE(gain_over_default(emu.db, row)) << row.key.to_string();
    const std::optional<std::string> default_id = analyze_key(emu.db, row).default_id;
    ASSERT_TRUE(default_id) << row.key.to_string();
    EXPECT_EQ(default_id->find(".softcap1") != std::string::npos, row.key.modifiers != 0) << *default_id;
  }
}

// Dropout is a modifier set of its own: its problems carry p (the sweep's
// `dropout`), its variants compile it in, it is tuned under its own key and
// dispatched from it; the decode kernels have none.
TEST(TunerTest, DropoutIsTunedUnderItsOwnKeyAndDispatched) {
  SweepSpec spec = spec_of({{"head_dims", "32"}, {"seqlens", "48"}, {"modifiers", "none, dropout"}}, 2);
  EXPECT_EQ(spec.dropout, 0.1);
  set_axis(spec, "dropout", "0.25");
  for (const char* bad : {"0", "1", "-0.5", "0.2,0.3", "half"}) {
    EXPECT_NE(testing::error_of([&] { set_axis(spec, "dropout", bad); }).find("expected one probability in (0, 1)"),
              std::string::npos)
        << bad;
  }
  testing::EmuTuning emu("attune_dropout_tuner");
  for (const char* op : {"fwd", "bwd"}) {
    set_axis(spec, "op", op);
    const std::vector<Task> tasks = plan(spec, emu.runtime.arch());
    ASSERT_EQ(tasks.size(), 4U) << op;
    for (const Task& t : tasks) {
      const bool dropout = t.problem.modifiers.dropout();
      EXPECT_EQ(t.problem.modifiers.dropout_p, dropout ? 0.25 : 0.0);
      EXPECT_EQ(t.variant.id().ends_with(".dropout1"), dropout) << t.variant.id();
      EXPECT_EQ(problem_key(task_op(t), t.problem).to_string().ends_with("/dropout"), dropout);
    }
    EXPECT_EQ(run_sweep(tasks, emu.runtime, emu.db, {.repetitions = 1}).failed, 0U) << op;
  }
  ASSERT_EQ(emu.db.best_for_device(kEmulatorDeviceKey).size(), 4U);  // (fwd, bwd) x (none, dropout)
  const DbTunedSource source(emu.db);
  const Runtime tuned({.backend = Backend::kEmu, .tuned = &source});
  set_axis(spec, "op", "fwd");
  const Task with = plan(spec, emu.runtime.arch()).back();
  ASSERT_TRUE(with.problem.modifiers.dropout());
  const DispatchChoice choice = tuned.explain(with.problem);
  EXPECT_EQ(choice.rule, DispatchRule::kTuned) << choice.detail;
  EXPECT_TRUE(choice.variant.id().ends_with(".dropout1")) << choice.variant.id();
  set_axis(spec, "op", "decode");
  EXPECT_NE(testing::error_of([&] { (void)plan(spec, emu.runtime.arch()); }).find("without dropout"),
            std::string::npos);
}

TEST(TunerTest, BackwardWithSinksRunsItsGateOnTheEmulator) {
  SweepSpec spec = spec_of({{"op", "bwd"},
                            {"head_dims", "32"},
                            {"seqlens", "40"},
                            {"masks", "causal"},
                            {"modifiers", "sinks, softcap+alibi"}},
                           1);
  Runtime runtime({.backend = Backend::kEmu});
  for (const Task& t : plan(spec, runtime.arch())) {
    const Measurement m = measure(runtime, t, {.warmup = 0, .repetitions = 1});
    EXPECT_TRUE(m.ok) << t.variant.id() << ": " << m.error;
    EXPECT_TRUE(m.median_ms && *m.median_ms > 0);
  }
}

TEST(SweepTest, BackwardFlopsAreTwoAndAHalfForwards) {
  // 3 x 5 visible pairs of a 3 x 5 unmasked problem, 2 heads, Dk 8.
  const AttentionProblem p = make_problem(std::vector<int64_t>{1, 3, 2, 8}, std::vector<int64_t>{1, 5, 1, 8},
                                          std::vector<int64_t>{1, 5, 1, 4}, {});
  EXPECT_DOUBLE_EQ(forward_flops(p), 4 * 2 * 8 * 15);
  EXPECT_DOUBLE_EQ(backward_flops(p), 2.5 * 4 * 2 * 8 * 15);
}

}  // namespace
}  // namespace attune::tuner
