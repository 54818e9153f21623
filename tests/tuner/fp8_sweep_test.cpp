// fp8 inputs in the tuner: fp8 Q, K and V forwards and fp8 KV caches under
// 16-bit queries are planned, gated against the dequantizing references,
// measured on the emulator, keyed by their storage names, and dispatched
// from the database; the backward refuses them with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/dispatch/tuned_id.h"
#include "tests/support/error_of.h"
#include "tests/tuner/emu_tuning.h"
#include "tuner/sweep.h"
#include "tuner/timing.h"
#include "tuner/tuner.h"

namespace attune::tuner {
namespace {

SweepSpec spec_of(std::initializer_list<std::pair<const char*, const char*>> axes, int max_variants = 2) {
  SweepSpec spec;
  for (const auto& [axis, values] : axes) set_axis(spec, axis, values);
  spec.max_variants = max_variants;
  return spec;
}

TEST(SweepFp8Test, AxesTakeFp8DtypesAndRefuseA16BitKvDtype) {
  SweepSpec spec = spec_of({{"dtypes", "e4m3, e5m2, bf16"}, {"kv_dtype", "e4m3"}});
  EXPECT_EQ(spec.dtypes, (std::vector<DType>{DType::kE4M3, DType::kE5M2, DType::kBF16}));
  EXPECT_EQ(spec.kv_dtype, DType::kE4M3);
  for (const char* bad : {"bf16", "fp16", "e4m3,e5m2", "int8"}) {
    EXPECT_NE(testing::error_of([&] { set_axis(spec, "kv_dtype", bad); }).find("expected e4m3 or e5m2"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(testing::error_of([&] { set_axis(spec, "dtypes", "fp32"); }).find("expected fp16, bf16, e4m3 or e5m2"),
            std::string::npos);
}

TEST(SweepFp8Test, PlanKeysByStorageAndCompilesTheFp8Loads) {
  const ArchLimits hopper = require_arch("sm_90a");
  // e4m3 Q, K, V: both families (flash_fwd_sm90 on 8-bit wgmma), each variant with the fp8 feature;
  // e5m2: the portable family only.
  const std::vector<Task> fwd = plan(spec_of({{"dtypes", "e4m3"}, {"head_dims", "128"}}, 0), hopper);
  ASSERT_FALSE(fwd.empty());
  std::set<std::string> kernels;
  for (const Task& t : fwd) {
    kernels.insert(std::string(t.variant.kernel->name));
    EXPECT_TRUE(t.variant.id().ends_with(".fp81")) << t.variant.id();
    EXPECT_EQ(t.problem.compute_dtype(), DType::kBF16);
    EXPECT_EQ(problem_key(task_op(t), t.problem).to_string().rfind("fwd/e4m3/dk128/", 0), 0U);
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"flash_fwd", "flash_fwd_sm90"}));
  for (const Task& t : plan(spec_of({{"dtypes", "e5m2"}, {"head_dims", "128"}}, 0), hopper)) {
    EXPECT_EQ(t.variant.kernel->name, std::string("flash_fwd")) << t.variant.id();
  }
  // An fp8 cache under bf16 queries, for decode and the forward.
  for (const char* op : {"decode", "fwd"}) {
    const std::vector<Task> tasks =
        plan(spec_of({{"op", op}, {"kv_dtype", "e5m2"}, {"head_dims", "64"}, {"seqlens", "256"}}), hopper);
    ASSERT_FALSE(tasks.empty()) << op;
    for (const Task& t : tasks) {
      EXPECT_TRUE(t.variant.id().ends_with(".fp81")) << t.variant.id();
      EXPECT_EQ(problem_key(task_op(t), t.problem).to_string().rfind(std::string(op) + "/bf16-kv-e5m2/", 0), 0U)
          << problem_key(task_op(t), t.problem).to_string();
    }
  }
  // The same format twice is no separate cache.
  const std::vector<Task> same = plan(spec_of({{"dtypes", "e4m3"}, {"kv_dtype", "e4m3"}}), hopper);
  ASSERT_FALSE(same.empty());
  EXPECT_FALSE(same.front().problem.kv_dtype.has_value());
}

TEST(SweepFp8Test, PlanRefusesFp8BackwardDropoutAndMixedFp8Formats) {
  const ArchLimits arch = require_arch("sm_80");
  EXPECT_NE(testing::error_of([&] {
              (void)plan(spec_of({{"op", "bwd"}, {"dtypes", "e4m3"}}), arch);
            }).find("no fp8 backward"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              (void)plan(spec_of({{"op", "bwd"}, {"kv_dtype", "e4m3"}}), arch);
            }).find("got bf16-kv-e4m3 with op bwd"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              (void)plan(spec_of({{"dtypes", "e4m3"}, {"modifiers", "dropout"}}), arch);
            }).find("no dropout with fp8 inputs"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              (void)plan(spec_of({{"dtypes", "e4m3"}, {"kv_dtype", "e5m2"}}), arch);
            }).find("kv_dtype: got e5m2 with dtype e4m3"),
            std::string::npos);
}

TEST(SweepFp8Test, RandomInputsAreFiniteFp8PackedAsTheKernelsReadThem) {
  const AttentionProblem p =
      make_problem(std::vector<std::int64_t>{1, 5, 2, 16}, std::vector<std::int64_t>{1, 7, 2, 16},
                   std::vector<std::int64_t>{1, 7, 2, 16}, {.dtype = DType::kBF16, .kv_dtype = DType::kE4M3});
  std::mt19937 rng(3);
  Inputs in;
  draw_qkv(p, rng, in);
  EXPECT_TRUE(in.q_fp8.empty());  // bf16 Q: its slots are its bytes
  EXPECT_EQ(in.stored_q().bytes, in.q.size() * 2);
  ASSERT_EQ(in.stored_k().bytes, in.k.size());
  ASSERT_EQ(in.stored_v().bytes, in.v.size());
  for (std::size_t i = 0; i < in.k.size(); ++i) {
    EXPECT_TRUE(std::isfinite(bits_to_float(DType::kE4M3, in.k[i]))) << i;
    EXPECT_EQ(in.k_fp8[i], in.k[i] & 0xFF) << i;
  }
}

// A tiny sweep of each kind on the emulator into `emu`'s database: every
// candidate passes the gate. Returns the forward's and decode's tasks.
std::pair<std::vector<Task>, std::vector<Task>> sweep_fp8(testing::EmuTuning& emu) {
  std::vector<Task> fwd = plan(
      spec_of({{"dtypes", "e4m3"}, {"head_dims", "32"}, {"seqlens", "48"}, {"masks", "causal"}}), emu.runtime.arch());
  EXPECT_EQ(fwd.size(), 2U);
  emu.sweep_once(fwd, {.measured = 2, .failed = 0});
  std::vector<Task> decode = plan(spec_of({{"op", "decode"},
                                           {"kv_dtype", "e4m3"},
                                           {"head_dims", "32"},
                                           {"seqlens", "300"},
                                           {"batch_heads", "1x1"},
                                           {"gqa", "4"},
                                           {"splits", "1,3"}}),
                                  emu.runtime.arch(), {}, emu.runtime.sm_count());
  EXPECT_EQ(decode.size(), 4U);
  emu.sweep_once(decode, {.measured = 4, .failed = 0});
  return {std::move(fwd), std::move(decode)};
}

TEST(TunerFp8Test, Fp8SweepsAreMeasuredAndKeyedByStorageName) {
  testing::EmuTuning emu("attune_fp8_tuner");
  sweep_fp8(emu);
  const auto best = emu.db.best_for_device(kEmulatorDeviceKey);
  ASSERT_EQ(best.size(), 2U);
  for (const auto& row : best) {
    EXPECT_NE(row.variant_id.find(".fp81"), std::string::npos) << row.variant_id;
    const std::string key = row.key.to_string();
    EXPECT_EQ(key.rfind(row.key.op == Op::kDecode ? "decode/bf16-kv-e4m3/dk32/" : "fwd/e4m3/dk32/", 0), 0U) << key;
  }
}

TEST(TunerFp8Test, Fp8SweepsAreDispatchedFromTheDatabase) {
  testing::EmuTuning emu("attune_fp8_dispatch");
  const auto [fwd, decode] = sweep_fp8(emu);
  const DbTunedSource source(emu.db);
  const Runtime tuned({.backend = Backend::kEmu, .tuned = &source});
  for (const auto& row : emu.db.best_for_device(kEmulatorDeviceKey)) {
    if (row.key.op == Op::kDecode) {
      const DecodeChoice choice = tuned.explain_decode(decode[0].problem);
      EXPECT_EQ(tuned_id(choice.variant, choice.splits), row.variant_id) << choice.reason;
      EXPECT_EQ(choice.reason.rfind("tuned", 0), 0U) << choice.reason;
    } else {
      const DispatchChoice choice = tuned.explain(fwd[0].problem);
      EXPECT_EQ(choice.rule, DispatchRule::kTuned) << choice.detail;
      EXPECT_EQ(choice.variant.id(), row.variant_id) << choice.detail;
    }
  }
}

TEST(TunerFp8Test, BackwardTaskOfFp8InputsFailsWithTheReason) {
  Runtime runtime({.backend = Backend::kEmu});
  const SweepSpec spec = spec_of({{"op", "bwd"}, {"head_dims", "32"}, {"seqlens", "48"}}, 1);
  Task task = plan(spec, runtime.arch()).front();
  // A task plan() would not make (it refuses fp8 backward): as a worker's arguments could describe it.
  task.problem.kv_dtype = DType::kE4M3;
  const Measurement m = measure(runtime, task, {.repetitions = 1});
  EXPECT_FALSE(m.ok);
  EXPECT_NE(m.error.find("no fp8 backward"), std::string::npos) << m.error;
}

}  // namespace
}  // namespace attune::tuner
