// Order between blocks in global memory: float reductions (atomic adds,
// ordered or not) against plain reads and stores of the same words, and the
// global semaphores (acquire waits, release adds) that order blocks. Blocks
// of a launch are ordered only through semaphores: each release publishes
// the releasing block's epoch and what it has seen, each acquire joins it.
// The granularity is the block: what a block's threads did before one of
// them releases is taken as released (ordering them inside the block is the
// job of its barriers, which the shared-memory checks see).
#include "emulator/machine.h"

namespace attune::emu {
namespace {

i64 linear_block(const Dim3& b, const Dim3& grid) {
  return b.x + static_cast<i64>(grid.x) * (b.y + static_cast<i64>(grid.y) * b.z);
}

std::string block_text(i64 linear, const Dim3& grid) {
  const i64 plane = static_cast<i64>(grid.x) * grid.y;
  return dim3_text(
      {static_cast<i32>(linear % grid.x), static_cast<i32>(linear % plane / grid.x), static_cast<i32>(linear / plane)});
}

}  // namespace

bool Emulator::Impl::happens_before(const Thread& t, const GlobalReductions::Record& r) const {
  if (GlobalWrites::launch_tag(r.block_record) != launch_tag) return true;  // an earlier launch
  if (r.unit == proxy_block) {
    // The same unit: its threads' clocks, once it keeps them (before that,
    // only block::sync orders its threads, and it is not tracked).
    if (!track_clocks || r.thread_clock == 0 || r.thread == t.linear) return true;
    return t.clock[static_cast<std::size_t>(r.thread)] >= r.thread_clock;
  }
  const BlockClock& known = acquired[static_cast<std::size_t>(t.rank)];
  const auto it = known.find(GlobalWrites::block(r.block_record));
  return it != known.end() && it->second >= r.epoch;
}

void Emulator::Impl::record_reduction(const Thread& t, Buffer& buffer, const void* p, u64 bytes, bool ordered,
                                      const Where& where) {
  if (t.block_record == 0) return;  // a grid too large to record
  const u64 offset = reinterpret_cast<std::uintptr_t>(p) - buffer.begin;
  const std::size_t rank = static_cast<std::size_t>(t.rank);
  const GlobalReductions::Record mine{t.block_record, proxy_block, epoch[rank], t.linear,
                                      track_clocks ? t.clock[static_cast<std::size_t>(t.linear)] : 0U};
  bool reported = false;
  for (u64 word = offset / 4 * 4; word < offset + bytes; word += 4) {
    const std::uint32_t writer = buffer.writes.writer(word);
    if (!reported && writer != 0 && GlobalWrites::launch_tag(writer) == launch_tag && writer != t.block_record) {
      report(BugKind::kGlobalRace, t, where,
             "add to bytes " + range_text(offset, bytes) + " of buffer '" + buffer.name + "' by block " +
                 dim3_text(t.block) + ": block " + block_text(GlobalWrites::block(writer), config.grid) +
                 " of the same launch stored to byte " + std::to_string(word) +
                 " with a plain store, and nothing orders a store and an add of two blocks");
      reported = true;
    }
    const GlobalReductions::Record before = buffer.reductions.exchange(word, mine);
    if (!reported && ordered && before.block_record != 0 && !happens_before(t, before)) {
      const bool same_block = before.block_record == t.block_record;
      report(BugKind::kGlobalRace, t, where,
             "ordered add to bytes " + range_text(offset, bytes) + " of buffer '" + buffer.name + "' by block " +
                 dim3_text(t.block) + ": the add to byte " + std::to_string(word) + " by " +
                 (same_block ? "thread " + std::to_string(before.thread) + " of the same block"
                             : "block " + block_text(GlobalWrites::block(before.block_record), config.grid)) +
                 " does not happen before it, so the float sum depends on the order the blocks run in (" +
                 (same_block ? "a barrier between the two adds is missing)"
                             : "a semaphore wait for that block's release is missing)"));
      reported = true;
    }
  }
}

void Emulator::Impl::check_against_reductions(const Thread& t, Buffer& buffer, const void* p, u64 bytes, bool write,
                                              const Where& where) {
  if (buffer.reductions.latest_tag() != launch_tag || t.block_record == 0) return;
  const u64 offset = reinterpret_cast<std::uintptr_t>(p) - buffer.begin;
  for (u64 word = offset / 4 * 4; word < offset + bytes; word += 4) {
    const GlobalReductions::Record* r = buffer.reductions.find(word);
    if (r == nullptr || r->block_record == t.block_record || happens_before(t, *r)) continue;
    report(BugKind::kGlobalRace, t, where,
           std::string(write ? "store to" : "read of") + " bytes " + range_text(offset, bytes) + " of buffer '" +
               buffer.name + "' by block " + dim3_text(t.block) + ": block " +
               block_text(GlobalWrites::block(r->block_record), config.grid) + " of the same launch added to byte " +
               std::to_string(word) + ", and nothing orders the two (a semaphore wait for its release is missing)");
    return;
  }
}

void Emulator::Impl::acquire(Thread& t, const i32* p) {
  const auto it = semaphore_clocks.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == semaphore_clocks.end()) return;
  join(acquired[static_cast<std::size_t>(t.rank)], it->second.blocks);
  // A release by a thread of the same unit orders its past before this
  // thread's future, as an mbarrier would.
  if (it->second.unit == proxy_block && track_clocks) {
    join(t.clock, it->second.threads);
    tick(t);
  }
}

void Emulator::Impl::semaphore_wait(const i32* p, i32 target, const Where& where) {
  Thread& t = *current;
  if (!check_global(t, p, sizeof(i32), /*write=*/false, where, sizeof(i32))) return;
  counters.global_bytes += sizeof(i32);
  i32 value = 0;
  std::memcpy(&value, p, sizeof value);
  if (value >= target) {
    acquire(t, p);
    return;
  }
  t.semaphore = p;
  t.semaphore_target = target;
  wait_here(t, State::kAtSemaphore, where);  // wake_semaphores acquires
}

void Emulator::Impl::semaphore_release(i32* p, i32 value, const Where& where) {
  Thread& t = *current;
  if (!check_global(t, p, sizeof(i32), /*write=*/true, where, sizeof(i32))) return;
  // A release covers the thread's bulk writes only once they are complete.
  if (t.bulk_writes_unfinished > 0 || !t.committed_stores.empty() || !t.open_stores.empty()) {
    report(BugKind::kGlobalRace, t, where,
           "semaphore release at " + global_text(p) +
               " while this thread's TMA stores or reductions may still be in flight (cp.async.bulk.wait_group 0, "
               "not .read, before the release)");
  }
  counters.global_bytes += sizeof(i32);
  i32 old = 0;
  std::memcpy(&old, p, sizeof old);
  const auto sum = static_cast<i32>(static_cast<u32>(old) + static_cast<u32>(value));
  std::memcpy(p, &sum, sizeof sum);
  const std::size_t rank = static_cast<std::size_t>(t.rank);
  SemaphoreClock& published = semaphore_clocks[reinterpret_cast<std::uintptr_t>(p)];
  join(published.blocks, acquired[rank]);
  std::uint32_t& own = published.blocks[linear_block(t.block, config.grid)];
  own = std::max(own, epoch[rank]);
  ++epoch[rank];
  ++releases;
  if (published.unit != proxy_block) {
    published.unit = proxy_block;
    published.threads.clear();
  }
  if (track_clocks) {
    join(published.threads, t.clock);
    tick(t);
  }
}

}  // namespace attune::emu
