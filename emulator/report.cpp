#include "emulator/report.h"

#include <algorithm>

#include "core/enum_names.h"

namespace attune::emu {

namespace {

std::string coords(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string summarize(const std::vector<BugReport>& reports, std::size_t dropped) {
  std::string text = "emulator found " + std::to_string(reports.size() + dropped) + " bug report(s)";
  for (const BugReport& r : reports) text += "\n  " + r.to_string();
  if (dropped != 0) text += "\n  ... and " + std::to_string(dropped) + " more";
  return text;
}

}  // namespace

constexpr NamedValue<BugKind> kBugKindNames[] = {
    {BugKind::kGlobalOutOfBounds, "global out-of-bounds access"},
    {BugKind::kSharedOutOfBounds, "shared out-of-bounds access"},
    {BugKind::kSharedRace, "shared-memory race"},
    {BugKind::kAsyncCopyReadBeforeWait, "cp.async data used before wait_group"},
    {BugKind::kBarrierDivergence, "barrier not reached by every thread"},
    {BugKind::kWarpDivergence, "warp collective not reached by every lane"},
    {BugKind::kKernelException, "kernel threw"},
    {BugKind::kWgmmaOperandInFlight, "wgmma operand touched while in flight"},
    {BugKind::kWgmmaDivergence, "wgmma not uniform across its warpgroup"},
    {BugKind::kAsyncProxyOrder, "shared memory not ordered with the async proxy"},
    {BugKind::kIllegalRegisterCount, "illegal setmaxnreg"},
    {BugKind::kMbarrierMisuse, "mbarrier misuse"},
    {BugKind::kDeadlock, "deadlock"},
    {BugKind::kTmaMisuse, "TMA misuse"},
    {BugKind::kGlobalRace, "global write race between blocks"}};

std::string_view to_string(BugKind kind) { return name_of(kBugKindNames, kind); }

std::string BugReport::to_string() const {
  return std::string(emu::to_string(kind)) + ": block " + coords(block) + " thread " + coords(thread) + " (warp " +
         std::to_string(warp) + " lane " + std::to_string(lane) + ") at " + site + ": " + detail;
}

KernelFault::KernelFault(std::vector<BugReport> reports, std::size_t dropped)
    : Error(summarize(reports, dropped)), reports_(std::move(reports)) {}

bool KernelFault::has(BugKind kind) const {
  return std::any_of(reports_.begin(), reports_.end(), [kind](const BugReport& r) { return r.kind == kind; });
}

}  // namespace attune::emu
