// Memory checks: global bounds against registered buffers, global bytes two
// blocks write, shared bounds and alignment, races between barriers and
// mbarrier or named-barrier hand-offs (the shadow), and the async proxy's
// ordering against ordinary stores.
#include "emulator/machine.h"

namespace attune::emu {

// `alignment` is what the access needs (its size for plain loads and
// stores, 1 where the caller checks alignment itself).
Buffer* Emulator::Impl::global_buffer(const Thread& t, const void* p, u64 bytes, bool write, const Where& where,
                                      u64 alignment) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const char* verb = write ? "write" : "read";
  auto it = buffers.upper_bound(addr);
  if (it != buffers.begin()) {
    --it;
    const std::uintptr_t begin = it->first;
    const std::uintptr_t size = it->second.end - begin;
    if (addr + bytes <= it->second.end) {
      if (addr % alignment != 0) {
        report(BugKind::kGlobalOutOfBounds, t, where,
               std::string("misaligned ") + verb + " of " + std::to_string(bytes) + " bytes at byte " +
                   std::to_string(addr - begin) + " of buffer '" + it->second.name + "'");
        return nullptr;
      }
      return &it->second;
    }
    // Past the end of the nearest buffer below: say where, relative to it.
    report(BugKind::kGlobalOutOfBounds, t, where,
           std::string(verb) + " of bytes " + range_text(addr - begin, bytes) + " of buffer '" + it->second.name +
               "', which has " + std::to_string(size) + " bytes");
    return nullptr;
  }
  report(BugKind::kGlobalOutOfBounds, t, where,
         std::string(verb) + " of " + std::to_string(bytes) + " bytes outside every registered buffer");
  return nullptr;
}

void Emulator::Impl::record_global_write(const Thread& t, Buffer& buffer, const void* p, u64 bytes,
                                         const Where& where) {
  if (t.block_record == 0) return;
  check_against_reductions(t, buffer, p, bytes, /*write=*/true, where);
  const u64 offset = reinterpret_cast<std::uintptr_t>(p) - buffer.begin;
  const auto conflict = buffer.writes.write(offset, bytes, t.block_record);
  if (!conflict) return;
  const i64 other = conflict->block;
  const i64 plane = static_cast<i64>(config.grid.x) * config.grid.y;
  const Dim3 other_index{static_cast<i32>(other % config.grid.x), static_cast<i32>(other % plane / config.grid.x),
                         static_cast<i32>(other / plane)};
  report(BugKind::kGlobalRace, t, where,
         "write of bytes " + range_text(offset, bytes) + " of buffer '" + buffer.name + "' by block " +
             dim3_text(t.block) + ": byte " + std::to_string(conflict->offset) + " was written by block " +
             dim3_text(other_index) +
             " of the same launch, and nothing orders two blocks (use an atomic, or give each byte one block)");
}

// Bounds and alignment of a shared access; the offset when it is valid.
std::optional<u64> Emulator::Impl::shared_offset(const Thread& t, const void* p, u64 bytes, const char* verb,
                                                 const Where& where) {
  // A block reaches only its own part of the cluster's shared memory (a
  // peer's goes through mapa: peer_offset).
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(shared.data()) + cta_base(t.rank);
  const auto size = cta_shared;
  if (addr < base || addr + bytes > base + size) {
    const long long offset = static_cast<long long>(addr) - static_cast<long long>(base);
    report(BugKind::kSharedOutOfBounds, t, where,
           std::string(verb) + " of shared bytes [" + std::to_string(offset) + ", " +
               std::to_string(offset + static_cast<long long>(bytes)) + ") but the dynamic shared memory has " +
               std::to_string(size) + " bytes");
    return std::nullopt;
  }
  const u64 local = addr - base;
  if (bytes > 1 && local % std::min<u64>(bytes, 16) != 0) {
    report(BugKind::kSharedOutOfBounds, t, where,
           std::string("misaligned ") + verb + " of " + std::to_string(bytes) + " bytes at shared byte " +
               std::to_string(local));
    return std::nullopt;
  }
  return local + cta_base(t.rank);
}

// Race and in-flight-copy checks of a valid shared access.
void Emulator::Impl::track_shared(const Thread& t, u64 offset, u64 bytes, bool write, const Where& where) {
  const auto conflict = track_clocks ? shadow.access(t.linear, t.clock.data(), offset, bytes, write)
                                     : shadow.access(t.linear, offset, bytes, write);
  if (!conflict) return;
  const Thread& other = threads[static_cast<std::size_t>(conflict->other_thread)];
  const char* verb = write ? "write" : "read";
  if (conflict->kind == SharedShadow::Conflict::Kind::kPendingAsyncCopy) {
    report(BugKind::kAsyncCopyReadBeforeWait, t, where,
           std::string(verb) + " of shared bytes " + range_text(offset, bytes) + ": byte " +
               std::to_string(conflict->offset) + " is the destination of a cp.async by thread " + thread_text(other) +
               " whose group has not been waited on (cp_async::wait)");
    return;
  }
  report(BugKind::kSharedRace, t, where,
         std::string(verb) + " of shared bytes " + range_text(offset, bytes) + " races with a " +
             (conflict->other_wrote ? "write" : "read") + " of byte " + std::to_string(conflict->offset) +
             " by thread " + thread_text(other) +
             (track_clocks ? " with no happens-before between them (no block barrier, and no mbarrier or named "
                             "barrier hand-off)"
                           : " since the last barrier"));
}

bool Emulator::Impl::check_shared(Thread& t, const void* p, u64 bytes, bool write, const Where& where) {
  const auto offset = shared_offset(t, p, bytes, write ? "write" : "read", where);
  if (!offset) return false;
  track_shared(t, *offset, bytes, write, where);
  check_async_visible(t, *offset, bytes, write ? "write" : "read", where);
  if (write) generic_write(t, *offset, bytes, where);
  count_shared(t, *offset, bytes, where);
  return true;
}

// An ordinary (generic-proxy) write: remembered for the async proxy's
// ordering rule, and refused while an in-flight wgmma reads the bytes.
void Emulator::Impl::generic_write(const Thread& t, u64 offset, u64 bytes, const Where& where) {
  // One pass over the bytes (this is the hot path of every shared store):
  // the first byte that breaks each rule, then the write's own record.
  constexpr u64 kNone = ~u64{0};
  u64 in_flight = kNone;
  u64 unordered = kNone;
  const std::uint32_t own_clock = track_clocks ? t.clock[static_cast<std::size_t>(t.linear)] : 0;
  for (u64 i = offset; i < offset + bytes; ++i) {
    ProxyCell& cell = proxy_cell(i);
    if (in_flight == kNone && cell.async_readers != 0) in_flight = i;
    if (unordered == kNone && track_clocks && cell.async_reader >= 0 &&
        t.clock[static_cast<std::size_t>(cell.async_reader)] < cell.async_read_clock) {
      unordered = i;
    }
    cell.writer = t.linear;
    cell.fences_at_write = t.proxy_fences;
    cell.write_clock = own_clock;
  }
  if (in_flight != kNone) {
    report(BugKind::kAsyncProxyOrder, t, where,
           "write of shared bytes " + range_text(offset, bytes) + ": byte " + std::to_string(in_flight) +
               " is an operand of a wgmma still in flight (wgmma::wait has not covered it)");
  }
  if (unordered != kNone) {
    report(BugKind::kAsyncProxyOrder, t, where,
           "write of shared bytes " + range_text(offset, bytes) + ": byte " + std::to_string(unordered) +
               " was read by a wgmma or TMA store of thread " +
               thread_text(threads[static_cast<std::size_t>(proxy[unordered].async_reader)]) +
               ", with no happens-before from that read to this write (it may have read the old bytes)");
  }
}

// Bytes a TMA load writes are the thread's to touch only once the phase
// that completed the load happens before (a wait, or a barrier after a
// thread that waited).
void Emulator::Impl::check_async_visible(const Thread& t, u64 offset, u64 bytes, const char* what, const Where& where) {
  for (u64 i = offset; i < offset + bytes; ++i) {
    const ProxyCell& cell = proxy_cell(i);
    if (cell.tma_pending != 0) {
      report(BugKind::kAsyncProxyOrder, t, where,
             std::string(what) + " of shared byte " + std::to_string(i) +
                 ", the destination of a TMA load whose mbarrier phase has not completed");
      return;
    }
    if (track_clocks && cell.async_write > t.clock.back()) {
      report(BugKind::kAsyncProxyOrder, t, where,
             std::string(what) + " of shared byte " + std::to_string(i) +
                 ", written by a TMA load, with no happens-before from the mbarrier phase that completed it "
                 "(wait on that mbarrier, or sync with a thread that did)");
      return;
    }
  }
}

bool Emulator::Impl::global_access(const void* p, u64 bytes, bool write, const Where& where) {
  counters.global_bytes += bytes;
  Buffer* buffer = global_buffer(*current, p, bytes, write, where, std::min<u64>(bytes, 16));
  if (buffer == nullptr) return false;
  if (write) {
    record_global_write(*current, *buffer, p, bytes, where);
  } else {
    check_against_reductions(*current, *buffer, p, bytes, /*write=*/false, where);
  }
  return true;
}

// Atomics are not recorded as writes: blocks may share them. Float adds are
// recorded as reductions (global_order.cpp).
void Emulator::Impl::atomic_add(float* p, float value, bool ordered, const Where& where) {
  Buffer* buffer = global_buffer(*current, p, sizeof(float), /*write=*/true, where, sizeof(float));
  if (buffer == nullptr) return;
  record_reduction(*current, *buffer, p, sizeof(float), ordered, where);
  float old = 0;
  std::memcpy(&old, p, sizeof(float));
  old += value;
  std::memcpy(p, &old, sizeof(float));
}

i32 Emulator::Impl::atomic_fetch_add(i32* p, i32 value, const Where& where) {
  if (!check_global(*current, p, sizeof(i32), /*write=*/true, where, sizeof(i32))) return 0;
  i32 old = 0;
  std::memcpy(&old, p, sizeof(i32));
  const auto sum = static_cast<i32>(static_cast<u32>(old) + static_cast<u32>(value));  // wraps, as on the GPU
  std::memcpy(p, &sum, sizeof(i32));
  return old;
}

}  // namespace attune::emu
