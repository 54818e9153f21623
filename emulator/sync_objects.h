// The synchronization objects of Hopper kernels as the emulator keeps them
// for one block: mbarriers (PTX ISA 9.7.13.15) and named barriers
// (9.7.13.1, bar.sync / bar.arrive), with the vector clocks that carry
// happens-before between threads through them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "templates/primitives/config.h"

namespace attune::emu {

// One component per thread of the block and one for its async proxy (the
// last): what a thread or an object has seen of each.
using VectorClock = std::vector<std::uint32_t>;

// into = max(into, from), component by component.
void join(VectorClock& into, const VectorClock& from);

// Happens-before between blocks of a launch, which only global semaphores
// order: per block (linear index), the newest of its epochs seen. A block's
// epoch grows by one at each of its releases.
using BlockClock = std::map<std::int64_t, std::uint32_t>;
void join(BlockClock& into, const BlockClock& from);

struct Mbarrier {
  bool initialized = false;
  i32 count = 0;                         // arrivals that complete a phase
  i32 pending = 0;                       // arrivals the current phase still waits for
  i64 tx = 0;                            // transaction bytes it still waits for
  i64 phase = 0;                         // the phase in progress
  i64 newest_observed = -1;              // the newest phase a wait saw complete (-1: the one before the first)
  i32 loads_in_flight = 0;               // TMA loads that complete on it
  i32 init_thread = -1;                  // who initialised it, and that thread's clock then: a block
  std::uint32_t init_clock = 0;          // of the cluster must have seen the init before it touches it
  VectorClock arrivals;                  // joined by each arrival of the current phase (release)
  std::array<VectorClock, 2> completed;  // of the last two completed phases, by parity (acquire)
};

// The phase a wait with this parity is for, while `phase` is in progress:
// that phase when the parities match (the wait blocks until it completes),
// else the previous one, already complete (on a fresh barrier, parity 1
// names the virtual phase -1: try_wait.parity(1) returns true at once).
inline i64 waited_phase(i64 phase, u32 parity) {
  return static_cast<u32>(phase & 1) == (parity & 1U) ? phase : phase - 1;
}

// "phase 3, 1 of 2 arrivals pending, 4096 transaction bytes pending, 1 TMA load in flight"
std::string describe(const Mbarrier& b);

struct NamedBarrier {
  i32 expected = 0;  // threads, from the first participant
  i32 arrived = 0;
  VectorClock clock;
  std::vector<i32> syncing;  // threads waiting in bar.sync
};

inline constexpr i32 kNamedBarriers = 16;  // ids 0..15; 0 is also block::sync's

}  // namespace attune::emu
