// Planted wrong variants in a sweep. The forward kernel that attends to the
// first key tile only (a copy made at configure time, see CMakeLists.txt).
// It does a fraction of the work, so it would be the fastest candidate; the
// correctness gate must record it as failed and it must never become best.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flash_bwd_no_row_d.cuh"
#include "flash_fwd_first_tile_only.cuh"
#include "generator/kernel_registry.h"
#include "generator/variants.h"
#include "runtime/dispatch/heuristics.h"
#include "templates/flash_fwd.cuh"
#include "tests/tuner/emu_tuning.h"
#include "tuner/sweep.h"
#include "tuner/tuner.h"

namespace attune::tuner {
namespace {

// The one instantiation the planted kernel offers.
constexpr int kPlantedValues[] = {32, 64, 32, 4, 1, 2, 0};

bool launch_planted(DType dtype, std::span<const int> values, emu::Emulator& emulator, const LaunchConfig& config,
                    const void* params) {
  if (dtype != DType::kBF16 || !std::equal(values.begin(), values.end(), std::begin(kPlantedValues))) return false;
  // The mutant's params type is its own copy of FlashFwdParams (same layout).
  emulator.launch(&flash_fwd_first_tile_only::flash_fwd<32, 64, 32, 4, 1, 2, 0, Bf16, 0, 0, 0, 0>, config,
                  *static_cast<const flash_fwd_first_tile_only::FlashFwdParams*>(params));
  return true;
}

// flash_fwd's description with the planted kernel behind it, under its own
// name and hash so its rows cannot be mistaken for the real kernel's.
KernelSpec planted_spec() {
  KernelSpec spec = *find_kernel_spec("flash_fwd");
  spec.name = "flash_fwd_first_tile_only";
  spec.source_hash = "planted-wrong-variant";
  spec.launch_on_emulator = &launch_planted;
  return spec;
}

TEST(PlantedWrongVariantTest, TheGateRecordsItAsFailedAndItIsNeverBest) {
  testing::EmuTuning emu("attune_planted");
  Runtime& runtime = emu.runtime;
  const KernelSpec planted = planted_spec();
  // Keys span several 32-key tiles, so attending to the first one is wrong.
  const AttentionProblem problem =
      make_problem(std::vector<std::int64_t>{1, 96, 2, 32}, std::vector<std::int64_t>{1, 96, 2, 32},
                   std::vector<std::int64_t>{1, 96, 2, 32}, {.dtype = DType::kBF16});
  std::vector<Task> tasks;
  tasks.push_back({problem, Variant{&planted, {std::begin(kPlantedValues), std::end(kPlantedValues)}}});
  for (const Variant& v : enumerate_variants("fwd", DType::kBF16, 32, 32, runtime.arch())) {
    if (tasks.size() == 3) break;
    tasks.push_back({problem, v});
  }
  const std::string planted_id = tasks[0].variant.id();
  ASSERT_EQ(planted_id.rfind("flash_fwd_first_tile_only/", 0), 0U) << planted_id;

  // The planted kernel runs clean and fast; only its result is wrong.
  const Measurement alone = measure(runtime, tasks[0], {.repetitions = 1});
  EXPECT_FALSE(alone.ok);
  EXPECT_EQ(alone.error.rfind("wrong result", 0), 0U) << alone.error;
  ASSERT_TRUE(alone.max_error.has_value());
  EXPECT_GT(*alone.max_error, 0.05);

  emu.sweep_once(tasks, {.measured = 2, .failed = 1});
  std::size_t planted_rows = 0;
  for (const tuning_db::MeasurementRow& row : emu.db.all_measurements()) {
    if (row.variant_id != planted_id) continue;
    ++planted_rows;
    EXPECT_FALSE(row.ok);
    EXPECT_FALSE(row.median_ms.has_value());
  }
  EXPECT_EQ(planted_rows, 1U);
  const auto best = emu.db.best_for_device(kEmulatorDeviceKey);
  ASSERT_EQ(best.size(), 1U);
  EXPECT_NE(best[0].variant_id, planted_id);
  EXPECT_EQ(best[0].kernel, "flash_fwd");
  EXPECT_TRUE(emu.db.verify().ok());
}

// The same for the backward gate: flash_bwd with dS = P dP instead of
// P (dP - D) (a mutant made for the kernel tests, see tests/kernels).
constexpr int kPlantedBwdValues[] = {32, 64, 32, 2, 2, 2, 1};

bool launch_planted_bwd(DType dtype, std::span<const int> values, emu::Emulator& emulator, const LaunchConfig& config,
                        const void* params) {
  if (dtype != DType::kBF16 || !std::equal(values.begin(), values.end(), std::begin(kPlantedBwdValues))) return false;
  emulator.launch(&no_row_d::flash_bwd<32, 64, 32, 2, 2, 2, 1, Bf16, 0, 0>, config,
                  *static_cast<const no_row_d::FlashBwdParams*>(params));
  return true;
}

TEST(PlantedWrongVariantTest, TheBackwardGateRecordsAWrongGradientAsFailed) {
  testing::EmuTuning emu("attune_planted_bwd");
  Runtime& runtime = emu.runtime;
  KernelSpec planted = *find_kernel_spec("flash_bwd");
  planted.name = "flash_bwd_without_d";
  planted.source_hash = "planted-wrong-variant";
  planted.launch_on_emulator = &launch_planted_bwd;
  const AttentionProblem problem =
      make_problem(std::vector<std::int64_t>{1, 80, 2, 32}, std::vector<std::int64_t>{1, 80, 2, 32},
                   std::vector<std::int64_t>{1, 80, 2, 32}, {.dtype = DType::kBF16});
  std::vector<Task> tasks;
  tasks.push_back(
      {problem, Variant{&planted, {std::begin(kPlantedBwdValues), std::end(kPlantedBwdValues)}}, 0, Op::kBackward});
  tasks.push_back({problem, heuristic_variant("bwd", DType::kBF16, 32, 32, runtime.arch()), 0, Op::kBackward});
  const Measurement alone = measure(runtime, tasks[0], {.repetitions = 1});
  EXPECT_FALSE(alone.ok);
  EXPECT_EQ(alone.error.rfind("wrong result", 0), 0U) << alone.error;
  emu.sweep_once(tasks, {.measured = 1, .failed = 1});
  const auto best = emu.db.best_for_device(kEmulatorDeviceKey);
  ASSERT_EQ(best.size(), 1U);
  EXPECT_EQ(best[0].kernel, tasks[1].variant.kernel->name);
  EXPECT_EQ(best[0].key.op, Op::kBackward);
}

// flash_fwd that drops one score modifier: the real kernel with that
// feature compiled off and the others read from the params (as the emulator
// runs every variant), under a name of its own.
template <int kSoftcap, int kSinks, int kAlibi>
bool launch_dropping(DType dtype, std::span<const int> values, emu::Emulator& emulator, const LaunchConfig& config,
                     const void* params) {
  if (dtype != DType::kBF16 || !std::equal(values.begin(), values.end(), std::begin(kPlantedValues))) return false;
  emulator.launch(&flash_fwd<32, 64, 32, 4, 1, 2, 0, Bf16, kSoftcap, kSinks, kAlibi, kAtRunTime>, config,
                  *static_cast<const FlashFwdParams*>(params));
  return true;
}

TEST(PlantedWrongVariantTest, AVariantThatDropsAModifierFailsTheGate) {
  Runtime runtime({.backend = Backend::kEmu});
  // Every modifier on (softcap 30, the sweep's default c; the gate caps at 4); the planted kernels drop one.
  SweepSpec spec;
  spec.modifiers = {kModAll};
  set_axis(spec, "head_dims", "32");
  set_axis(spec, "seqlens", "96");
  spec.max_variants = 1;
  const AttentionProblem problem = plan(spec, runtime.arch()).front().problem;
  const struct {
    const char* dropped;  // nothing: the control, every modifier read from the params
    decltype(KernelSpec::launch_on_emulator) launch;
  } cases[] = {{"nothing", &launch_dropping<kAtRunTime, kAtRunTime, kAtRunTime>},
               {"softcap", &launch_dropping<0, kAtRunTime, kAtRunTime>},
               {"sinks", &launch_dropping<kAtRunTime, 0, kAtRunTime>},
               {"alibi", &launch_dropping<kAtRunTime, kAtRunTime, 0>}};
  for (const auto& c : cases) {
    KernelSpec planted = *find_kernel_spec("flash_fwd");
    planted.name = std::string("flash_fwd_without_") + c.dropped;
    planted.source_hash = "planted-wrong-variant";
    planted.launch_on_emulator = c.launch;
    const Task task{problem, Variant{&planted, {std::begin(kPlantedValues), std::end(kPlantedValues)}, kModAll}};
    const Measurement m = measure(runtime, task, {.repetitions = 1});
    if (std::string(c.dropped) == "nothing") {
      EXPECT_TRUE(m.ok) << m.error;
      continue;
    }
    EXPECT_FALSE(m.ok) << "a variant without " << c.dropped << " passed the gate";
    EXPECT_EQ(m.error.rfind("wrong result", 0), 0U) << m.error;
  }
}

}  // namespace
}  // namespace attune::tuner
