#include "emulator/sync_objects.h"

#include <algorithm>

namespace attune::emu {

void join(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void join(BlockClock& into, const BlockClock& from) {
  for (const auto& [block, epoch] : from) {
    std::uint32_t& mine = into[block];
    mine = std::max(mine, epoch);
  }
}

std::string describe(const Mbarrier& b) {
  if (!b.initialized) return "not initialised";
  std::string text = "phase " + std::to_string(b.phase) + ", " + std::to_string(b.pending) + " of " +
                     std::to_string(b.count) + " arrivals pending, " + std::to_string(b.tx) +
                     " transaction bytes pending";
  if (b.loads_in_flight > 0) text += ", " + std::to_string(b.loads_in_flight) + " TMA load(s) in flight";
  return text;
}

}  // namespace attune::emu
