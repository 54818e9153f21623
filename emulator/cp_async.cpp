// cp.async: 16-byte copies grouped by commit, landed as late as the ISA
// allows (the wait, or the end of the block), their destinations tracked as
// pending in the race shadow.
#include "emulator/machine.h"

namespace attune::emu {

void Emulator::Impl::cp_async(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where) {
  Thread& t = *current;
  const auto offset = shared_offset(t, shared_dst, 16, "cp.async write", where);
  if (!offset) return;
  AsyncCopy copy{*offset, {}};
  if (src_bytes < 0 || src_bytes > 16) {
    report(BugKind::kGlobalOutOfBounds, t, where,
           "cp.async source size " + std::to_string(src_bytes) + " outside 0..16");
    return;
  }
  if (src_bytes > 0 && check_global(t, global_src, static_cast<u64>(src_bytes), /*write=*/false, where, 1)) {
    if (reinterpret_cast<std::uintptr_t>(global_src) % 16 != 0) {
      report(BugKind::kGlobalOutOfBounds, t, where, "cp.async source not 16-byte aligned");
    }
    std::memcpy(copy.data.data(), global_src, static_cast<std::size_t>(src_bytes));  // the rest is zero-fill
  }
  counters.global_bytes += static_cast<u64>(src_bytes);
  // A new copy onto bytes still in flight, or onto bytes others use, is a race.
  track_shared(t, *offset, 16, /*write=*/true, where);
  generic_write(t, *offset, 16, where);
  count_shared(t, *offset, 16, where);
  shadow.mark_pending(t.linear, *offset, 16);
  t.open_group.push_back(copy);
}

void Emulator::Impl::cp_async_commit() {
  Thread& t = *current;
  t.committed.push_back(std::move(t.open_group));
  t.open_group.clear();
}

void Emulator::Impl::cp_async_wait(i32 pending, const Where& where) {
  Thread& t = *current;
  // Land the oldest groups until at most `pending` remain in flight: copies
  // land as late as the ISA allows.
  while (t.committed.size() > static_cast<std::size_t>(pending)) {
    land(t, t.committed.front(), where);
    t.committed.pop_front();
  }
}

void Emulator::Impl::land(Thread& t, const std::vector<AsyncCopy>& group, const Where& where) {
  for (const AsyncCopy& copy : group) {
    shadow.clear_pending(copy.offset, copy.data.size());
    track_shared(t, copy.offset, copy.data.size(), /*write=*/true, where);
    std::memcpy(shared.data() + copy.offset, copy.data.data(), copy.data.size());
  }
}

}  // namespace attune::emu
