#include <gtest/gtest.h>
#include <cstdio>
#include "tuner/tuner.h"

namespace attune::tuner {
namespace {
void run(const char* op, const char* extra_axis, const char* extra, const char* seqlens, const char* bh, int maxv) {
  Runtime runtime({.backend = Backend::kEmu});
  SweepSpec spec;
  set_axis(spec, "op", op);
  set_axis(spec, "dtypes", "bf16,fp16");
  set_axis(spec, "head_dims", "32,64");
  set_axis(spec, "masks", "none,causal,causal-top-left");
  set_axis(spec, "modifiers", "none,softcap,sinks,alibi,softcap+sinks+alibi");
  set_axis(spec, "seqlens", seqlens);
  set_axis(spec, "batch_heads", bh);
  if (extra_axis) set_axis(spec, extra_axis, extra);
  spec.max_variants = maxv;
  const auto tasks = plan(spec, runtime.arch(), {}, runtime.sm_count());
  int failed = 0;
  double worst = 0;
  for (const Task& t : tasks) {
    const Measurement m = measure(runtime, t, {.warmup = 0, .repetitions = 1});
    if (!m.ok) { ++failed; std::printf("FAIL %s %s: %s\n", task_variant_id(t).c_str(), problem_key(t.op, t.problem).to_string().c_str(), m.error.c_str()); }
    worst = std::max(worst, m.max_error.value_or(0));
  }
  std::printf("%s: %zu tasks, %d failed, worst max_error %g\n", op, tasks.size(), failed, worst);
  EXPECT_EQ(failed, 0);
}
TEST(Exp, Fwd) { run("fwd", nullptr, nullptr, "100", "1x4", 4); }
TEST(Exp, Decode) { run("decode", "gqa", "8", "300", "1x2", 3); }
TEST(Exp, DecodeQ) { run("decode", "queries", "4", "200", "2x2", 2); }
TEST(Exp, Bwd) { run("bwd", nullptr, nullptr, "64", "1x2", 3); }
TEST(Exp, BwdGqa) { run("bwd", nullptr, nullptr, "150", "2x4", 2); }
}
}
