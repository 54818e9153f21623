// TMA: tensor-map loads onto an mbarrier, landed as late as the ISA allows,
// and bulk stores and reductions performed at their wait or the end of the block.
#include "emulator/machine.h"

namespace attune::emu {

bool Emulator::Impl::tma_map(const Thread& t, const TensorMap* map, i32 rank, const Where& where, TensorMapSpec* spec) {
  if (!decode_emulated_tensor_map(*map, spec)) {
    report(BugKind::kTmaMisuse, t, where, "the tensor map is not one the emulator made (encode_emulated_tensor_map)");
    return false;
  }
  if (spec->rank != rank) {
    report(BugKind::kTmaMisuse, t, where,
           std::to_string(rank) + "-D TMA on a tensor map of rank " + std::to_string(spec->rank));
    return false;
  }
  for (int d = 0; d < rank; ++d) {
    if (spec->element_strides[static_cast<std::size_t>(d)] != 1) {
      report(BugKind::kTmaMisuse, t, where, "element strides other than 1 are not modelled by the emulator");
      return false;
    }
  }
  return true;
}

// The box's shared bytes: in bounds and aligned (128 bytes, or the swizzle
// atom, 8 rows of the span).
std::optional<u64> Emulator::Impl::tma_box(const Thread& t, const void* smem, const TensorMapSpec& spec,
                                           const char* what, const Where& where) {
  const auto offset = shared_offset(t, smem, box_bytes(spec), what, where);
  if (!offset) return std::nullopt;
  const u64 alignment = static_cast<u64>(sm90::swizzle_atom_bytes(spec.swizzle));
  if (*offset % alignment != 0) {
    report(BugKind::kTmaMisuse, t, where,
           std::string(what) + " at shared byte " + std::to_string(*offset) + ": expected a multiple of " +
               std::to_string(alignment) +
               (spec.swizzle == sm90::Swizzle::kNone ? std::string(" bytes")
                                                     : " bytes (a swizzled buffer starts at its swizzle atom)"));
    return std::nullopt;
  }
  return offset;
}

namespace {

// The tensor map decoded into `spec` and the shared offset of its box, both
// checked (tma_map, tma_box); nothing once either has reported a bug.
std::optional<u64> tma_mapped_box(Emulator::Impl& e, const Thread& t, const TensorMap* map, i32 rank, const void* smem,
                                  const char* what, const Where& where, TensorMapSpec* spec) {
  if (!e.tma_map(t, map, rank, where, spec)) return std::nullopt;
  return e.tma_box(t, smem, *spec, what, where);
}

}  // namespace

void Emulator::Impl::land(TmaLoad& load) {
  ++async_clock;
  const u64 elem = static_cast<u64>(load.map.element_bytes);
  for_each_box_element(load.map, load.coords, [&](u64 box_byte, const void* global) {
    const u64 at = sm90::swizzle_address(load.map.swizzle, static_cast<u32>(load.destination + box_byte));
    if (global != nullptr) {
      std::memcpy(shared.data() + at, global, elem);
    } else {
      std::memset(shared.data() + at, 0, elem);  // outside the tensor: zeros, as on the GPU
    }
    for (u64 i = at; i < at + elem; ++i) {
      ProxyCell& cell = proxy_cell(i);
      --cell.tma_pending;
      cell.async_write = async_clock;
      cell.writer = -1;
    }
  });
  Mbarrier& b = mbarriers[load.barrier];
  if (track_clocks) {
    join(b.arrivals, load.issuer_clock);
    b.arrivals.back() = std::max(b.arrivals.back(), async_clock);
  }
  --b.loads_in_flight;
  complete_tx(threads[static_cast<std::size_t>(load.issuer)], load.barrier, b, static_cast<i64>(box_bytes(load.map)),
              load.site);
}

// Lands the loads whose mbarriers have every arrival: called when no
// thread can run, the latest moment the ISA allows.
bool Emulator::Impl::land_tma_loads() {
  bool landed = false;
  for (std::size_t i = 0; i < loads.size();) {
    if (mbarriers[loads[i].barrier].pending != 0) {
      ++i;
      continue;
    }
    TmaLoad load = std::move(loads[i]);
    loads.erase(loads.begin() + static_cast<std::ptrdiff_t>(i));
    land(load);
    landed = true;
  }
  return landed;
}

void Emulator::Impl::perform_store(const Thread& t, const TmaStore& store) {
  const u64 elem = static_cast<u64>(store.map.element_bytes);
  for_each_box_element(store.map, store.coords, [&](u64 box_byte, void* global) {
    const u64 at = sm90::swizzle_address(store.map.swizzle, static_cast<u32>(store.source + box_byte));
    for (u64 i = at; i < at + elem; ++i) {
      ProxyCell& cell = proxy_cell(i);
      --cell.async_readers;
      if (track_clocks) {
        cell.async_reader = t.linear;
        cell.async_read_clock = t.clock[static_cast<std::size_t>(t.linear)];
      }
    }
    if (global == nullptr) return;  // outside the tensor: not written
    Buffer* buffer = global_buffer(t, global, elem, true, store.site, 1);
    if (buffer == nullptr) return;
    if (store.kind == BulkWrite::kStore) {
      record_global_write(t, *buffer, global, elem, store.site);
      std::memcpy(global, shared.data() + at, elem);
      return;
    }
    // .add.f32: each element an atomic add (the map's elements are 4 bytes, checked at issue).
    record_reduction(t, *buffer, global, elem, store.kind == BulkWrite::kOrderedAdd, store.site);
    float sum = 0;
    float add = 0;
    std::memcpy(&sum, global, sizeof sum);
    std::memcpy(&add, shared.data() + at, sizeof add);
    sum += add;
    std::memcpy(global, &sum, sizeof sum);
  });
}

void Emulator::Impl::issue_load(Thread& t, const TmaLoad& prototype, u64 destination, u64 barrier_offset, Mbarrier& b,
                                const Where& where) {
  TmaLoad load = prototype;
  load.destination = destination;
  load.barrier = barrier_offset;
  // The destination: not read by an in-flight wgmma or TMA store, not
  // filled by another load, and released by its last wgmma reader.
  const u64 elem = static_cast<u64>(load.map.element_bytes);
  std::string problem;
  for_each_box_element(load.map, load.coords, [&](u64 box_byte, const void* /*global*/) {
    const u64 at = sm90::swizzle_address(load.map.swizzle, static_cast<u32>(load.destination + box_byte));
    for (u64 i = at; i < at + elem; ++i) {
      ProxyCell& cell = proxy_cell(i);
      if (problem.empty() && cell.async_readers != 0) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", which an in-flight wgmma or TMA store reads";
      } else if (problem.empty() && cell.tma_pending != 0) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", which another TMA load still fills";
      } else if (problem.empty() && track_clocks && cell.async_reader >= 0 &&
                 t.clock[static_cast<std::size_t>(cell.async_reader)] < cell.async_read_clock) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", read by the wgmma of thread " +
                  thread_text(threads[static_cast<std::size_t>(cell.async_reader)]) +
                  " with no happens-before from that read to this load (the consumer's release of the stage is "
                  "missing)";
      }
      ++cell.tma_pending;
    }
    // Ordinary reads and writes of the bytes must happen before the load
    // too (a stage that consumers read with loads, a peer block's stage).
    const auto conflict = track_clocks ? shadow.access(t.linear, t.clock.data(), at, elem, /*write=*/true)
                                       : std::optional<SharedShadow::Conflict>{};
    if (problem.empty() && conflict) {
      problem = "TMA load onto shared byte " + std::to_string(conflict->offset) + ", " +
                (conflict->other_wrote ? "written" : "read") + " by thread " +
                thread_text(threads[static_cast<std::size_t>(conflict->other_thread)]) +
                " with no happens-before from that access to this load (the release of the stage is missing)";
    }
  });
  if (!problem.empty()) report(BugKind::kAsyncProxyOrder, t, where, problem);
  ++b.loads_in_flight;
  loads.push_back(std::move(load));
}

namespace {

// A load's tensor map, coordinates and issuer, and whether its global bytes
// are a registered buffer's (one check per element row).
bool prepare_load(Emulator::Impl& e, Thread& t, const i32* coords, i32 rank, const Where& where, TmaLoad* load) {
  std::copy(coords, coords + rank, load->coords.begin());
  load->issuer = t.linear;
  load->issuer_clock = t.clock;
  load->site = where;
  const u64 elem = static_cast<u64>(load->map.element_bytes);
  bool global_ok = true;
  for_each_box_element(load->map, load->coords, [&](u64 /*box_byte*/, const void* global) {
    if (global_ok && global != nullptr) global_ok = e.check_global(t, global, elem, false, where, 1);
  });
  return global_ok;
}

}  // namespace

void Emulator::Impl::tma_load(void* smem, const TensorMap* map, u64* bar, const i32* coords, i32 rank,
                              const Where& where) {
  Thread& t = *current;
  TmaLoad load;
  const auto destination = tma_mapped_box(*this, t, map, rank, smem, "TMA load destination", where, &load.map);
  if (!destination) return;
  u64 barrier_offset = 0;
  Mbarrier* b = barrier_at(t, bar, "TMA load onto", where, &barrier_offset);
  if (b == nullptr) return;
  prepare_load(*this, t, coords, rank, where, &load);
  issue_load(t, load, *destination, barrier_offset, *b, where);
}

void Emulator::Impl::tma_load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, const i32* coords,
                                        i32 rank, const Where& where) {
  Thread& t = *current;
  TmaLoad load;
  const auto destination = tma_mapped_box(*this, t, map, rank, smem, "TMA multicast destination", where, &load.map);
  if (!destination) return;
  const auto own_barrier = shared_offset(t, bar, 8, "TMA multicast onto", where);
  if (!own_barrier) return;
  if (cta_mask == 0 || cta_mask >> cluster_ctas != 0) {
    report(
        BugKind::kTmaMisuse, t, where,
        "TMA multicast to blocks 0x" +
            [&] {
              char hex[16];
              std::snprintf(hex, sizeof hex, "%x", cta_mask);
              return std::string(hex);
            }() +
            ": expected a non-empty mask of the cluster's " + std::to_string(cluster_ctas) + " block rank(s)");
    return;
  }
  prepare_load(*this, t, coords, rank, where, &load);
  for (i32 r = 0; r < cluster_ctas; ++r) {
    if ((cta_mask >> r & 1U) == 0) continue;
    const u64 barrier_offset = in_block(*own_barrier, t.rank, r);
    Mbarrier* b = peer_barrier(t, barrier_offset, r, "TMA multicast", where);
    if (b == nullptr) continue;
    issue_load(t, load, in_block(*destination, t.rank, r), barrier_offset, *b, where);
  }
}

void Emulator::Impl::tma_store(const TensorMap* map, const void* smem, const i32* coords, i32 rank, const Where& where,
                               BulkWrite kind) {
  Thread& t = *current;
  TmaStore store;
  store.kind = kind;
  const auto source = tma_mapped_box(*this, t, map, rank, smem, "TMA store source", where, &store.map);
  if (!source) return;
  if (kind != BulkWrite::kStore && (store.map.element_bytes != 4 || !store.map.fp32)) {
    report(BugKind::kTmaMisuse, t, where,
           "TMA reduce-add through a map of " + std::to_string(store.map.element_bytes) +
               "-byte elements that are not fp32; the emulator models .add.f32 (a map of fp32 elements)");
    return;
  }
  store.source = *source;
  std::copy(coords, coords + rank, store.coords.begin());
  store.site = where;
  // The source: written by ordinary stores that are fenced for the async
  // proxy and happen before this store.
  const u64 elem = static_cast<u64>(store.map.element_bytes);
  std::string problem;
  for_each_box_element(store.map, store.coords, [&](u64 box_byte, const void* /*global*/) {
    const u64 at = sm90::swizzle_address(store.map.swizzle, static_cast<u32>(store.source + box_byte));
    for (u64 i = at; i < at + elem; ++i) {
      ProxyCell& cell = proxy_cell(i);
      const i32 w = cell.writer;
      if (problem.empty() && w >= 0 && threads[static_cast<std::size_t>(w)].proxy_fences == cell.fences_at_write) {
        problem = "TMA store reads shared byte " + std::to_string(i) + ", written by thread " +
                  thread_text(threads[static_cast<std::size_t>(w)]) +
                  " with an ordinary store and no fence.proxy.async since";
      } else if (problem.empty() && w >= 0 && w != t.linear && track_clocks &&
                 t.clock[static_cast<std::size_t>(w)] < cell.write_clock) {
        problem = "TMA store reads shared byte " + std::to_string(i) + ", written by thread " +
                  thread_text(threads[static_cast<std::size_t>(w)]) +
                  " with no happens-before to this store (a barrier between the writes and the store)";
      }
      ++cell.async_readers;
    }
  });
  if (!problem.empty()) report(BugKind::kAsyncProxyOrder, t, where, problem);
  t.open_stores.push_back(store);
}

void Emulator::Impl::tma_commit() {
  Thread& t = *current;
  t.committed_stores.push_back(std::move(t.open_stores));
  t.open_stores.clear();
}

void Emulator::Impl::tma_wait_read(i32 pending) {
  Thread& t = *current;
  while (t.committed_stores.size() > static_cast<std::size_t>(pending)) {
    for (const TmaStore& store : t.committed_stores.front()) perform_store(t, store);
    t.committed_stores.pop_front();
    ++t.bulk_writes_unfinished;
  }
}

void Emulator::Impl::tma_wait(i32 pending) {
  tma_wait_read(pending);
  current->bulk_writes_unfinished = 0;
}

void Emulator::Impl::tma_prefetch(const TensorMap* map, const Where& where) {
  TensorMapSpec spec;
  if (!decode_emulated_tensor_map(*map, &spec)) {
    report(BugKind::kTmaMisuse, *current, where,
           "prefetch of a tensor map the emulator did not make (encode_emulated_tensor_map)");
  }
}

}  // namespace attune::emu
