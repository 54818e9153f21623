// mbarriers (phases, arrivals, transaction bytes, parities) and named
// barriers, with the vector clocks that carry happens-before through them.
#include "emulator/machine.h"

namespace attune::emu {

void Emulator::Impl::start_clocks() {
  if (track_clocks) return;
  track_clocks = true;
  for (Thread& t : threads) {
    t.clock = fresh_clock();
    t.clock[static_cast<std::size_t>(t.linear)] = 1;
  }
}

Mbarrier* Emulator::Impl::barrier_at(Thread& t, const u64* bar, const char* what, const Where& where, u64* offset_out) {
  const auto offset = shared_offset(t, bar, 8, what, where);
  if (!offset) return nullptr;
  *offset_out = *offset;
  Mbarrier& b = mbarriers[*offset];
  if (!b.initialized) {
    report(BugKind::kMbarrierMisuse, t, where,
           std::string(what) + " of the mbarrier at shared byte " + std::to_string(*offset) +
               " before mbarrier::init (or after mbarrier::invalidate)");
    return nullptr;
  }
  return &b;
}

void Emulator::Impl::observe(Thread& t, u64 offset, Mbarrier& b, i64 phase) {
  if (phase >= 0 && track_clocks) join(t.clock, b.completed[static_cast<std::size_t>(phase & 1)]);
  t.next_phase[offset] = phase + 1;
  b.newest_observed = std::max(b.newest_observed, phase);
}

// Completes the phase once no arrival and no transaction byte is missing,
// and hands it to the threads waiting for it.
void Emulator::Impl::maybe_complete(u64 offset, Mbarrier& b) {
  if (b.pending != 0 || b.tx != 0) return;
  b.completed[static_cast<std::size_t>(b.phase & 1)] = b.arrivals;
  ++b.phase;
  b.pending = b.count;
  b.arrivals = fresh_clock();
  for (Thread& w : threads) {
    if (w.state == State::kAtMbarrier && w.wait_offset == offset && w.wait_phase < b.phase) {
      observe(w, offset, b, w.wait_phase);
      w.state = State::kRunnable;
    }
  }
}

void Emulator::Impl::arrive(Thread& t, u64 offset, Mbarrier& b, u32 tx_bytes, const Where& where) {
  if (b.phase >= 1 && b.newest_observed < b.phase - 1) {
    report(BugKind::kMbarrierMisuse, t, where,
           "arrival on phase " + std::to_string(b.phase) + " of the mbarrier at shared byte " + std::to_string(offset) +
               ", but phase " + std::to_string(b.phase - 1) +
               " completed with no thread waiting for it (its hand-off was lost)");
    b.newest_observed = b.phase - 1;  // once per phase
  }
  if (b.pending == 0) {
    report(BugKind::kMbarrierMisuse, t, where,
           "arrival beyond the count of " + std::to_string(b.count) + " on phase " + std::to_string(b.phase) +
               " of the mbarrier at shared byte " + std::to_string(offset));
    return;
  }
  b.tx += tx_bytes;
  if (track_clocks) join(b.arrivals, t.clock);
  tick(t);
  --b.pending;
  maybe_complete(offset, b);
}

// Transaction bytes a TMA load completed on the barrier.
void Emulator::Impl::complete_tx(Thread& issuer, u64 offset, Mbarrier& b, i64 bytes, const Where& where) {
  b.tx -= bytes;
  if (b.tx < 0) {
    report(BugKind::kMbarrierMisuse, issuer, where,
           "transaction bytes: a TMA load completed " + std::to_string(bytes) +
               " bytes on the mbarrier at shared byte " + std::to_string(offset) + " in phase " +
               std::to_string(b.phase) + ", " + std::to_string(-b.tx) + " more than expect_tx announced");
    b.tx = 0;
  }
  maybe_complete(offset, b);
}

void Emulator::Impl::named_barrier(Thread& t, i32 id, i32 count, bool sync, const Where& where) {
  if (id < 0 || id >= kNamedBarriers || count <= 0 || count % kWarpSize != 0 || count > cta_threads) {
    report(BugKind::kBarrierDivergence, t, where,
           "named barrier " + std::to_string(id) + " for " + std::to_string(count) +
               " threads: expected an id in 0..15 and a multiple of 32 up to the block's " +
               std::to_string(cta_threads) + " threads");
    throw AbortLaunch{};
  }
  start_clocks();
  NamedBarrier& n = named[static_cast<std::size_t>(t.rank)][static_cast<std::size_t>(id)];
  if (n.arrived == 0) {
    n.expected = count;
    n.clock = fresh_clock();
  } else if (n.expected != count) {
    report(BugKind::kBarrierDivergence, t, where,
           "named barrier " + std::to_string(id) + " for " + std::to_string(count) + " threads, while " +
               std::to_string(n.arrived) + " thread(s) already there expect " + std::to_string(n.expected));
    throw AbortLaunch{};
  }
  join(n.clock, t.clock);
  tick(t);
  ++n.arrived;
  if (sync) n.syncing.push_back(t.linear);
  if (n.arrived == n.expected) {
    for (const i32 s : n.syncing) {
      Thread& w = threads[static_cast<std::size_t>(s)];
      join(w.clock, n.clock);
      tick(w);
      w.state = State::kRunnable;
    }
    n = NamedBarrier{};
    return;
  }
  if (sync) {
    t.wait_named = id;
    wait_here(t, State::kAtNamedBarrier, where);
  }
}

void Emulator::Impl::mbarrier_init(u64* bar, i32 count, const Where& where) {
  Thread& t = *current;
  const auto offset = shared_offset(t, bar, 8, "mbarrier::init", where);
  if (!offset) return;
  start_clocks();
  Mbarrier& b = mbarriers[*offset];
  if (b.initialized) {
    report(BugKind::kMbarrierMisuse, t, where,
           "mbarrier::init of the mbarrier at shared byte " + std::to_string(*offset) +
               ", which is initialised already (" + describe(b) + ")");
  }
  if (count < 1 || count > (1 << 20) - 1) {
    report(BugKind::kMbarrierMisuse, t, where,
           "mbarrier::init with count " + std::to_string(count) + ": expected 1..1048575");
    return;
  }
  b = Mbarrier{};
  b.initialized = true;
  b.count = count;
  b.pending = count;
  b.arrivals = fresh_clock();
  b.init_thread = t.linear;
  b.init_clock = t.clock[static_cast<std::size_t>(t.linear)];
  tick(t);
}

void Emulator::Impl::mbarrier_arrive(u64* bar, u32 tx_bytes, const Where& where) {
  Thread& t = *current;
  u64 offset = 0;
  if (Mbarrier* b = barrier_at(t, bar, "arrive", where, &offset)) arrive(t, offset, *b, tx_bytes, where);
}

std::optional<u64> Emulator::Impl::peer_offset(Thread& t, u64 own, i32 cta, const char* what, const Where& where) {
  if (cta < 0 || cta >= cluster_ctas) {
    report(BugKind::kMbarrierMisuse, t, where,
           std::string(what) + " for block rank " + std::to_string(cta) + " of a cluster of " +
               std::to_string(cluster_ctas) + " block(s)");
    return std::nullopt;
  }
  return in_block(own, t.rank, cta);
}

Mbarrier* Emulator::Impl::peer_barrier(Thread& t, u64 offset, i32 cta, const char* what, const Where& where) {
  Mbarrier& b = mbarriers[offset];
  const u64 local = offset - cta_base(cta);
  if (cta != t.rank && block_exited(cta)) {
    report(BugKind::kMbarrierMisuse, t, where,
           std::string(what) + " on the mbarrier at shared byte " + std::to_string(local) + " of block rank " +
               std::to_string(cta) +
               ", which has exited: its shared memory is gone (cluster::sync before a block of a cluster exits)");
    return nullptr;
  }
  if (!b.initialized) {
    report(BugKind::kMbarrierMisuse, t, where,
           std::string(what) + " on the mbarrier at shared byte " + std::to_string(local) + " of block rank " +
               std::to_string(cta) + " before its mbarrier::init (or after mbarrier::invalidate)");
    return nullptr;
  }
  if (cta != t.rank && track_clocks && b.init_thread >= 0 &&
      t.clock[static_cast<std::size_t>(b.init_thread)] < b.init_clock) {
    report(BugKind::kMbarrierMisuse, t, where,
           std::string(what) + " on the mbarrier at shared byte " + std::to_string(local) + " of block rank " +
               std::to_string(cta) +
               ", whose mbarrier::init this thread has not seen (fence.mbarrier_init and cluster::sync between them)");
    return nullptr;
  }
  return &b;
}

void Emulator::Impl::mbarrier_arrive_cluster(u64* bar, i32 cta, const Where& where) {
  Thread& t = *current;
  const auto own = shared_offset(t, bar, 8, "remote arrive", where);
  if (!own) return;
  const auto offset = peer_offset(t, *own, cta, "remote arrive", where);
  if (!offset) return;
  Mbarrier* b = peer_barrier(t, *offset, cta, "remote arrive", where);
  if (b == nullptr) return;
  if (cta != t.rank && track_clocks) {
    remote_arrivals[static_cast<std::size_t>(cta)][t.linear] = {t.clock[static_cast<std::size_t>(t.linear)], *offset,
                                                                where};
  }
  arrive(t, *offset, *b, 0, where);
}

void Emulator::Impl::check_exit(i32 rank) {
  const auto r = static_cast<std::size_t>(rank);
  if (exited[r] || !block_exited(rank)) return;
  exited[r] = true;
  if (!track_clocks) return;
  VectorClock seen = fresh_clock();
  for (const Thread& x : threads_of(rank)) join(seen, x.clock);
  for (const auto& [thread, a] : remote_arrivals[r]) {
    if (seen[static_cast<std::size_t>(thread)] >= a.clock) continue;
    report(BugKind::kMbarrierMisuse, threads[static_cast<std::size_t>(thread)], a.site,
           "remote arrive on the mbarrier at shared byte " + std::to_string(a.offset - cta_base(rank)) +
               " of block rank " + std::to_string(rank) +
               ", which has exited with no wait that saw the arrival (its shared memory may be gone first: a "
               "block of a cluster waits for its peer's last arrivals, or passes cluster::sync, before it exits)");
  }
}

void Emulator::Impl::mbarrier_expect_tx(u64* bar, u32 tx_bytes, const Where& where) {
  Thread& t = *current;
  u64 offset = 0;
  if (Mbarrier* b = barrier_at(t, bar, "expect_tx", where, &offset)) b->tx += tx_bytes;
}

void Emulator::Impl::mbarrier_wait(u64* bar, u32 parity, const Where& where) {
  Thread& t = *current;
  u64 offset = 0;
  Mbarrier* b = barrier_at(t, bar, "wait", where, &offset);
  if (b == nullptr) return;
  const i64 phase = waited_phase(b->phase, parity);
  const auto known = t.next_phase.find(offset);
  const i64 expected = known == t.next_phase.end() ? -1 : known->second;
  if (phase < expected) {
    report(BugKind::kMbarrierMisuse, t, where,
           "wait with parity " + std::to_string(parity & 1U) + " on the mbarrier at shared byte " +
               std::to_string(offset) + " is for phase " + std::to_string(phase) +
               ", which this thread saw complete already: it returns at once (a wrong parity; the barrier is at " +
               describe(*b) + ")");
    return;
  }
  if (phase < b->phase) {
    observe(t, offset, *b, phase);
    return;
  }
  t.wait_offset = offset;
  t.wait_phase = phase;
  wait_here(t, State::kAtMbarrier, where);
}

void Emulator::Impl::mbarrier_invalidate(u64* bar, const Where& where) {
  Thread& t = *current;
  u64 offset = 0;
  if (Mbarrier* b = barrier_at(t, bar, "invalidate", where, &offset)) b->initialized = false;
}

}  // namespace attune::emu
