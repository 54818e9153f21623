// Shared-memory traffic per template line, for the speed model: a warp
// instruction's accesses are grouped until the warp converges, then priced
// by the bank model.
#include "emulator/machine.h"

namespace attune::emu {

void Emulator::Impl::count_shared(Thread& t, u64 offset, u64 bytes, const Where& where) {
  SiteVisit site{where.file_name(), where.line(), where.column(), 0};
  auto it = std::find_if(t.visits.begin(), t.visits.end(), [&](const auto& v) {
    return v.first.file == site.file && v.first.line == site.line && v.first.column == site.column;
  });
  if (it == t.visits.end()) {
    t.visits.push_back({site, 0});
    it = t.visits.end() - 1;
  }
  site.occurrence = it->second++;
  pending_shared[static_cast<std::size_t>(t.warp)][site].push_back(
      LaneAccess{t.lane, offset, static_cast<std::uint32_t>(bytes)});
}

void Emulator::Impl::add_site(const std::string& site, const Wavefronts& w) {
  SiteTraffic& s = counters.sites[site];
  s.site = site;
  ++s.instructions;
  s.wavefronts += w.actual;
  s.ideal += w.ideal;
  counters.shared_wavefronts += w.actual;
  counters.shared_ideal += w.ideal;
}

// The warp has converged: its pending accesses are complete instructions.
void Emulator::Impl::flush_shared(std::size_t warp) {
  if (warp >= pending_shared.size()) return;
  for (const auto& [visit, lanes] : pending_shared[warp]) {
    add_site(site_text(visit.file, visit.line), access_wavefronts(lanes));
    ++counters.shared_instructions;
  }
  pending_shared[warp].clear();
  const std::size_t first = warp * kWarpSize;
  for (std::size_t l = first; l < std::min(threads.size(), first + kWarpSize); ++l) threads[l].visits.clear();
}

void Emulator::Impl::flush_all_shared() {
  for (std::size_t w = 0; w < pending_shared.size(); ++w) flush_shared(w);
}

}  // namespace attune::emu
