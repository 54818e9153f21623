#include "emulator/counters.h"

#include <algorithm>

namespace attune::emu {

void LaunchCounters::add(const LaunchCounters& o) {
  mma += o.mma;
  wgmma += o.wgmma;
  wgmma_flops += o.wgmma_flops;
  ldmatrix += o.ldmatrix;
  shuffles += o.shuffles;
  shared_instructions += o.shared_instructions;
  shared_wavefronts += o.shared_wavefronts;
  shared_ideal += o.shared_ideal;
  ex2 += o.ex2;
  tanh += o.tanh;
  barriers += o.barriers;
  global_bytes += o.global_bytes;
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
  d.mma = sub(mma, b.mma);
  d.wgmma = sub(wgmma, b.wgmma);
  d.wgmma_flops = sub(wgmma_flops, b.wgmma_flops);
  d.ldmatrix = sub(ldmatrix, b.ldmatrix);
  d.shuffles = sub(shuffles, b.shuffles);
  d.shared_instructions = sub(shared_instructions, b.shared_instructions);
  d.shared_wavefronts = sub(shared_wavefronts, b.shared_wavefronts);
  d.shared_ideal = sub(shared_ideal, b.shared_ideal);
  d.ex2 = sub(ex2, b.ex2);
  d.tanh = sub(tanh, b.tanh);
  d.barriers = sub(barriers, b.barriers);
  d.global_bytes = sub(global_bytes, b.global_bytes);
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
