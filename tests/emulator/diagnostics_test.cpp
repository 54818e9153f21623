// emulator/diagnostics.cpp: the text of a report names the template line by
// its project-relative path, threads by coordinates and id ranges, and a hang
// by where each group of threads waits and what each barrier holds.
#include <gtest/gtest.h>

#include <string>

#include "emulator/machine.h"
#include "templates/primitives/hopper.h"
#include "tests/emulator/emu_fixture.h"

namespace attune::emu_test {
namespace {

TEST(DiagnosticsTest, SitesAreProjectRelative) {
  EXPECT_EQ(emu::site_text("/home/u/attune/templates/flash_tile.cuh", 123), "templates/flash_tile.cuh:123");
  EXPECT_EQ(emu::site_text("/x/tests/emulator/a.cpp", 7), "tests/emulator/a.cpp:7");
  EXPECT_EQ(emu::site_text("elsewhere.cpp", 1), "elsewhere.cpp:1");
}

TEST(DiagnosticsTest, ThreadIdsCollapseIntoRanges) {
  EXPECT_EQ(emu::id_ranges({0, 1, 2, 3, 96}), "0-3, 96");
  EXPECT_EQ(emu::id_ranges({5}), "5");
  EXPECT_EQ(emu::id_ranges({0, 2, 3}), "0, 2-3");
  EXPECT_EQ(emu::range_text(16, 4), "[16, 20)");
}

// Warp 0 waits on an mbarrier nobody arrives on; warp 1 exits.
ATTUNE_KERNEL void lost_arrival(Buffers p) {
  auto* bar = dev::shared_memory<u64>();
  const i32 t = dev::thread_index().x;
  if (t == 0) dev::mbarrier::init(bar, 2);
  dev::block::sync();
  if (t < 32) dev::mbarrier::wait(bar, 0);
  if (t == 0) dev::store_global(p.out, 1.0F);
}

TEST(DiagnosticsTest, AHangSaysWhereEveryGroupOfThreadsWaitsAndWhatTheBarrierHolds) {
  Fixture f(1, 1);
  const emu::KernelFault fault = expect_fault(
      &lost_arrival, {.grid = {1, 1, 1}, .block = {64, 1, 1}, .dynamic_shared_bytes = 64}, f.params(), f.emulator);
  ASSERT_EQ(fault.reports().size(), 1U) << fault.what();
  const emu::BugReport& r = fault.reports().front();
  EXPECT_EQ(r.kind, emu::BugKind::kDeadlock);
  EXPECT_NE(r.detail.find("threads 0-31 waiting on the mbarrier at shared byte 0 for phase 0"), std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("threads 32-63 exited"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("; mbarrier at shared byte 0: "), std::string::npos) << r.detail;
  EXPECT_NE(r.site.find("diagnostics_test.cpp:"), std::string::npos) << r.site;
}

}  // namespace
}  // namespace attune::emu_test
