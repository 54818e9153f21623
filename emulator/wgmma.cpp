// The wgmma pipeline: issue at a warpgroup rendezvous, registers poisoned
// while in flight, shared operands read at the wait that retires it; and
// setmaxnreg's per-warpgroup register budget.
#include "emulator/machine.h"

namespace attune::emu {

namespace {

template <class T>
void take_in_flight(std::map<T*, InFlightRegisters<T>>& table, T* registers, std::size_t count, bool* written) {
  auto [it, fresh] = table.try_emplace(registers);
  if (fresh) {
    it->second.values.assign(registers, registers + count);
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      if (std::bit_cast<u32>(registers[i]) != kInFlightPoison) *written = true;
    }
  }
  for (std::size_t i = 0; i < count; ++i) registers[i] = std::bit_cast<T>(kInFlightPoison);
  ++it->second.in_flight;
}

// One wgmma retired for a thread: the last one using the registers gives
// them their values back. False when they were written meanwhile.
template <class T>
bool give_back(std::map<T*, InFlightRegisters<T>>& table, T* registers) {
  auto it = table.find(registers);
  if (it == table.end() || --it->second.in_flight > 0) return true;
  bool intact = true;
  for (std::size_t i = 0; i < it->second.values.size(); ++i) {
    if (std::bit_cast<u32>(registers[i]) != kInFlightPoison) intact = false;
    registers[i] = it->second.values[i];
  }
  table.erase(it);
  return intact;
}

}  // namespace

bool Emulator::Impl::resolve_warpgroups() {
  bool progressed = false;
  constexpr std::size_t kSize = sm90::kWarpgroupSize;
  for (std::size_t g = 0; g * kSize < threads.size(); ++g) {
    Thread* group = &threads[g * kSize];
    const std::size_t count = std::min(kSize, threads.size() - g * kSize);
    if (!std::all_of(group, group + count, [](const Thread& t) { return t.state == State::kAtWarpgroupOp; })) continue;
    if (count != kSize) {
      report(BugKind::kWgmmaDivergence, group[0], group[0].site,
             "wgmma in a partial warpgroup of " + std::to_string(count) + " threads: it needs all 128");
      throw AbortLaunch{};
    }
    if (group[0].wgmma.wait) {
      // wait_group is aligned across the warpgroup: the wgmmas it covers run
      // once every thread is there, as late as the ISA allows.
      for (std::size_t l = 0; l < count; ++l) {
        if (!group[l].wgmma.wait || group[l].wgmma.pending != group[0].wgmma.pending) {
          report(BugKind::kWgmmaDivergence, group[l], group[l].site,
                 "thread " + std::to_string(l) + " of the warpgroup is at " +
                     (group[l].wgmma.wait ? "wgmma::wait<" + std::to_string(group[l].wgmma.pending) + ">"
                                          : std::string("a wgmma")) +
                     " (" + site_of(group[l].site) + ") while thread 0 is at wgmma::wait<" +
                     std::to_string(group[0].wgmma.pending) + "> (" + site_of(group[0].site) + ")");
          throw AbortLaunch{};
        }
      }
      for (std::size_t l = 0; l < count; ++l) retire_wgmmas(group[l], group[l].wgmma.pending, group[l].site);
    } else {
      issue_wgmma(g);
    }
    for (std::size_t l = 0; l < count; ++l) group[l].state = State::kRunnable;
    progressed = true;
  }
  return progressed;
}

void Emulator::Impl::issue_wgmma(std::size_t warpgroup) {
  Thread* group = &threads[warpgroup * sm90::kWarpgroupSize];
  const Thread& first = group[0];
  for (i32 l = 1; l < sm90::kWarpgroupSize; ++l) {
    const Thread& t = group[l];
    if (t.wgmma.wait || !(t.wgmma.shape == first.wgmma.shape) || !same_site(t.site, first.site) ||
        t.wgmma.accumulate != first.wgmma.accumulate || t.wgmma_commits != first.wgmma_commits) {
      if (t.wgmma.wait) {
        report(BugKind::kWgmmaDivergence, t, t.site,
               "thread " + std::to_string(l) + " of the warpgroup is at wgmma::wait (" + site_of(t.site) +
                   ") while thread 0 issues " + shape_text(first.wgmma.shape) + " (" + site_of(first.site) +
                   "): not every thread of the warpgroup executes the wgmma");
        throw AbortLaunch{};
      }
      report(BugKind::kWgmmaDivergence, t, t.site,
             "thread " + std::to_string(l) + " of the warpgroup issues " + shape_text(t.wgmma.shape) + " (" +
                 site_of(t.site) + ", accumulate " + std::to_string(t.wgmma.accumulate) + ") while thread 0 issues " +
                 shape_text(first.wgmma.shape) + " (" + site_of(first.site) + ", accumulate " +
                 std::to_string(first.wgmma.accumulate) + ")");
      throw AbortLaunch{};
    }
  }
  InFlightWgmma op;
  op.shape = first.wgmma.shape;
  op.group = first.wgmma_commits;
  op.accumulate = first.wgmma.accumulate != 0;
  op.site = first.site;
  // Operands in shared memory: in bounds, ordered after ordinary writes by
  // fence.proxy.async, and marked as read until the wgmma runs.
  // (Descriptors address the block's own shared memory: its part of the cluster's.)
  op.addresses = wgmma_operand_addresses(op.shape);
  const u64 size = cta_shared;
  const u32 bytes = static_cast<u32>(wgmma_element_bytes(op.shape));
  const u32 base = static_cast<u32>(cta_base(first.rank));
  for (u32& address : op.addresses) {
    if (address + bytes > size) {
      report(BugKind::kSharedOutOfBounds, first, first.site,
             "wgmma " + shape_text(op.shape) + " reads shared bytes [" + std::to_string(address) + ", " +
                 std::to_string(address + bytes) + ") but the dynamic shared memory has " + std::to_string(size) +
                 " bytes");
      throw AbortLaunch{};
    }
    address += base;
  }
  bool unfenced_reported = false;
  for (const u32 address : op.addresses) {
    for (u32 i = address; i < address + bytes; ++i) {
      ProxyCell& cell = proxy_cell(i);
      const i32 writer = cell.writer;
      if (!unfenced_reported && writer >= 0 &&
          threads[static_cast<std::size_t>(writer)].proxy_fences == cell.fences_at_write) {
        report(BugKind::kAsyncProxyOrder, first, first.site,
               "wgmma reads shared byte " + std::to_string(i) + ", written by thread " +
                   thread_text(threads[static_cast<std::size_t>(writer)]) +
                   " with an ordinary store and no fence.proxy.async since (the async proxy may read stale data)");
        unfenced_reported = true;
      }
      ++cell.async_readers;
    }
    // Not entered in the barrier-epoch shadow: the async proxy's clocks
    // order this read against ordinary stores (check_async_visible below, and
    // the stores onto in-flight operands), through mbarriers, named barriers
    // and wgmma waits that the epochs do not see.
  }
  for (const u32 address : op.addresses) {
    const std::size_t before = reports.size();
    check_async_visible(group[0], address, bytes, "wgmma operand read", first.site);
    if (reports.size() != before) break;
  }
  bool needs_fence = false;
  op.d.resize(sm90::kWarpgroupSize);
  if (op.shape.a_in_registers) op.a.resize(sm90::kWarpgroupSize);
  for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) {
    Thread& t = group[l];
    needs_fence = needs_fence || t.wgmma_needs_fence;
    op.d[static_cast<std::size_t>(l)] = t.wgmma.d;
    bool written = false;
    take_in_flight(t.accumulators, t.wgmma.d, static_cast<std::size_t>(op.shape.n / 2), &written);
    if (op.shape.a_in_registers) {
      for (std::size_t q = 0; q < 4; ++q) op.a_values[static_cast<std::size_t>(l)][q] = t.wgmma.a[q];
      op.a[static_cast<std::size_t>(l)] = t.wgmma.a;
      auto found = t.a_operands.find(t.wgmma.a);
      if (found != t.a_operands.end()) {
        for (std::size_t q = 0; q < 4; ++q) op.a_values[static_cast<std::size_t>(l)][q] = found->second.values[q];
      }
      take_in_flight(t.a_operands, t.wgmma.a, 4, &written);
    }
    if (written) {
      report(BugKind::kWgmmaOperandInFlight, t, t.site,
             "the accumulators or A registers of this wgmma were written while an earlier wgmma on them was in "
             "flight (before the wgmma::wait that covers it)");
    }
  }
  if (needs_fence) {
    report(BugKind::kWgmmaOperandInFlight, first, first.site,
           "wgmma without a wgmma::fence since the warpgroup's registers were last accessible to other "
           "instructions (the start, or a wgmma::wait)");
    for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) group[l].wgmma_needs_fence = false;
  }
  ++counters.wgmma;
  counters.wgmma_flops +=
      2ULL * sm90::kWgmmaM * static_cast<std::uint64_t>(op.shape.n) * static_cast<std::uint64_t>(wgmma_k(op.shape));
  wgmma_ops[warpgroup].push_back(std::move(op));
}

void Emulator::Impl::execute_wgmma(std::size_t warpgroup, InFlightWgmma& op) {
  Thread* group = &threads[warpgroup * sm90::kWarpgroupSize];
  std::vector<std::vector<float>> acc(sm90::kWarpgroupSize);
  for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) {
    acc[static_cast<std::size_t>(l)] = group[l].accumulators.at(op.d[static_cast<std::size_t>(l)]).values;
  }
  // Shared memory is read now, as late as the ISA allows.
  const u32 bytes = static_cast<u32>(wgmma_element_bytes(op.shape));
  // The descriptors address the warpgroup's block's own shared memory.
  const u64 base = cta_base(group[0].rank);
  const auto read_u16 = [&](u32 address) {
    u16 bits = 0;  // an 8-bit element in the low byte (little-endian)
    std::memcpy(&bits, shared.data() + base + address, bytes);
    return bits;
  };
  wgmma_compute(op.shape, read_u16, op.a_values, op.accumulate, acc);
  for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) {
    group[l].accumulators.at(op.d[static_cast<std::size_t>(l)]).values = std::move(acc[static_cast<std::size_t>(l)]);
  }
  const Thread& reader = group[0];
  if (track_clocks) op.read_clock = reader.clock[static_cast<std::size_t>(reader.linear)];
  for (const u32 address : op.addresses) {
    for (u32 i = address; i < address + bytes; ++i) {
      ProxyCell& cell = proxy_cell(i);
      --cell.async_readers;
      if (track_clocks) {
        cell.async_reader = reader.linear;
        cell.async_read_clock = reader.clock[static_cast<std::size_t>(reader.linear)];
      }
    }
  }
  op.executed = true;
}

void Emulator::Impl::retire_wgmmas(Thread& t, i32 pending, const Where& where) {
  const std::size_t warpgroup = static_cast<std::size_t>(t.linear / sm90::kWarpgroupSize);
  const i32 lane = t.linear % sm90::kWarpgroupSize;
  std::vector<InFlightWgmma>& ops = wgmma_ops[warpgroup];
  const i32 limit = t.wgmma_commits - pending;
  bool retired = false;
  while (t.wgmma_retired < ops.size() && ops[t.wgmma_retired].group < limit) {
    InFlightWgmma& op = ops[t.wgmma_retired];
    if (!op.executed) execute_wgmma(warpgroup, op);
    if (track_clocks) {  // the wait orders the wgmma's reads before what follows in this thread
      const auto reader = static_cast<std::size_t>(warpgroup * sm90::kWarpgroupSize);
      t.clock[reader] = std::max(t.clock[reader], op.read_clock);
    }
    bool intact = give_back(t.accumulators, op.d[static_cast<std::size_t>(lane)]);
    if (op.shape.a_in_registers) intact = give_back(t.a_operands, op.a[static_cast<std::size_t>(lane)]) && intact;
    if (!intact) {
      report(BugKind::kWgmmaOperandInFlight, t, where,
             "the accumulators or A registers of the wgmma at " + site_of(op.site) +
                 " were written while it was in flight (before this wgmma::wait covered it)");
    }
    ++t.wgmma_retired;
    retired = true;
  }
  if (retired) t.wgmma_needs_fence = true;
}

void Emulator::Impl::wgmma(const WgmmaShape& shape, u32* a_registers, float* d, i32 accumulate, const Where& where) {
  Thread& t = *current;
  t.wgmma.wait = false;
  t.wgmma.shape = shape;
  t.wgmma.d = d;
  t.wgmma.a = a_registers;
  t.wgmma.accumulate = accumulate;
  wait_here(t, State::kAtWarpgroupOp, where);
}

void Emulator::Impl::wgmma_wait(i32 pending, const Where& where) {
  Thread& t = *current;
  t.wgmma.wait = true;
  t.wgmma.pending = pending;
  wait_here(t, State::kAtWarpgroupOp, where);
}

void Emulator::Impl::setmaxnreg(bool increase, i32 registers, const Where& where) {
  const Thread& t = *current;
  const char* op = increase ? "setmaxnreg.inc " : "setmaxnreg.dec ";
  if (registers < 24 || registers > 256 || registers % 8 != 0) {
    report(BugKind::kIllegalRegisterCount, t, where,
           op + std::to_string(registers) + ": expected a multiple of 8 in 24..256");
    return;
  }
  // A warpgroup collective: its thread 0 speaks for it.
  if (t.linear % sm90::kWarpgroupSize != 0) return;
  const auto group = static_cast<std::size_t>(t.linear / sm90::kWarpgroupSize);
  i32& held = warpgroup_registers[group];
  if (increase ? registers < held : registers > held) {
    report(BugKind::kIllegalRegisterCount, t, where,
           op + std::to_string(registers) + " from " + std::to_string(held) + " registers per thread: an " +
               (increase ? "increase must not lower" : "decrease must not raise") + " the count");
    return;
  }
  held = registers;
  if (increase) last_increase[group] = {&t, where};
}

void Emulator::Impl::in_flight_value_stored(const Where& where) {
  report(BugKind::kWgmmaOperandInFlight, *current, where,
         "stores 0x7FBADBAD, the NaN a wgmma accumulator holds while the wgmma is in flight: it was read before "
         "the wgmma::wait that covers it");
}

}  // namespace attune::emu
