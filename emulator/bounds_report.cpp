#include "emulator/bounds_report.h"

#include <mutex>

#include "core/bounds_text.h"
#include "templates/primitives/emulated.h"

namespace attune::emu {

namespace {

std::mutex g_mutex;
BoundsReport g_report{};
bool g_claimed = false;  // a report of this generation is kept

}  // namespace

BoundsReport bounds_report_record() {
  const std::lock_guard lock(g_mutex);
  return g_report;
}

std::string bounds_report() { return describe_bounds_report(bounds_report_record()); }

void clear_bounds_report() {
  const std::lock_guard lock(g_mutex);
  const u32 generation = g_report.generation + 1;
  g_report = BoundsReport{};
  g_report.generation = generation;
  g_claimed = false;
}

namespace hooks {

void report_bounds(u32 kind, i32 batch, i32 index, i32 value, i32 limit) {
  const std::lock_guard lock(g_mutex);
  if (g_claimed) return;
  g_claimed = true;
  g_report = BoundsReport{.magic = kBoundsReportMagic,
                          .generation = g_report.generation,
                          .kind = kind,
                          .batch = batch,
                          .index = index,
                          .value = value,
                          .limit = limit,
                          .reserved = g_report.reserved};
}

}  // namespace hooks

}  // namespace attune::emu
