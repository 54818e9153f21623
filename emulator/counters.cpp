#include "emulator/counters.h"

#include <algorithm>

namespace attune::emu {

namespace {

// Every scalar count of a launch, for the operations that treat them alike.
constexpr std::uint64_t LaunchCounters::*kLaunchCounts[] = {&LaunchCounters::mma,
                                                            &LaunchCounters::wgmma,
                                                            &LaunchCounters::wgmma_flops,
                                                            &LaunchCounters::ldmatrix,
                                                            &LaunchCounters::shuffles,
                                                            &LaunchCounters::shared_instructions,
                                                            &LaunchCounters::shared_wavefronts,
                                                            &LaunchCounters::shared_ideal,
                                                            &LaunchCounters::ex2,
                                                            &LaunchCounters::tanh,
                                                            &LaunchCounters::barriers,
                                                            &LaunchCounters::global_bytes};

}  // namespace

void LaunchCounters::add(const LaunchCounters& o) {
  for (const auto count : kLaunchCounts) this->*count += o.*count;
  for (const auto& [site, t] : o.sites) {
    SiteTraffic& mine = sites[site];
    mine.site = site;
    mine.instructions += t.instructions;
    mine.wavefronts += t.wavefronts;
    mine.ideal += t.ideal;
  }
}

double LaunchCounters::ratio() const {
  return shared_ideal == 0 ? 1.0 : static_cast<double>(shared_wavefronts) / static_cast<double>(shared_ideal);
}

std::vector<SiteTraffic> LaunchCounters::worst(std::size_t count) const {
  std::vector<SiteTraffic> all;
  all.reserve(sites.size());
  for (const auto& [site, t] : sites) all.push_back(t);
  std::sort(all.begin(), all.end(), [](const SiteTraffic& a, const SiteTraffic& b) {
    const auto excess = [](const SiteTraffic& t) { return t.wavefronts - std::min(t.wavefronts, t.ideal); };
    return excess(a) != excess(b) ? excess(a) > excess(b) : a.site < b.site;
  });
  if (all.size() > count) all.resize(count);
  return all;
}

LaunchCounters LaunchCounters::minus(const LaunchCounters& b) const {
  const auto sub = [](std::uint64_t x, std::uint64_t y) { return x > y ? x - y : 0; };
  LaunchCounters d;
  for (const auto count : kLaunchCounts) d.*count = sub(this->*count, b.*count);
  for (const auto& [site, t] : sites) {
    const auto it = b.sites.find(site);
    SiteTraffic s{site, t.instructions, t.wavefronts, t.ideal};
    if (it != b.sites.end()) {
      s.instructions = sub(t.instructions, it->second.instructions);
      s.wavefronts = sub(t.wavefronts, it->second.wavefronts);
      s.ideal = sub(t.ideal, it->second.ideal);
    }
    if (s.instructions > 0) d.sites[site] = s;
  }
  return d;
}

}  // namespace attune::emu
