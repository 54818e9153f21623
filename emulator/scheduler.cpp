// The scheduler: one fiber per thread of a block, run until each parks at a
// rendezvous (a barrier, a warp collective, a wgmma, an mbarrier); then the
// rendezvous that can complete do, and a block that can never continue is a
// hang, reported with where every thread waits.
#include "emulator/machine.h"

namespace attune::emu {

void Emulator::Impl::thread_entry(void* arg) {
  auto* self = static_cast<Emulator::Impl*>(arg);
  Thread& t = *self->current;
  try {
    (*self->body)();
  } catch (...) {
    if (!self->kernel_exception) self->kernel_exception = std::current_exception();
  }
  t.state = State::kDone;
}

void Emulator::Impl::launch(const LaunchConfig& launch_config, const std::function<void()>& thread_body) {
  const std::int64_t block_threads = volume(launch_config.block);
  if (launch_config.block.x < 1 || launch_config.block.y < 1 || launch_config.block.z < 1 || block_threads > 1024) {
    throw InvalidArgument("block shape: got " + std::to_string(launch_config.block.x) + "x" +
                          std::to_string(launch_config.block.y) + "x" + std::to_string(launch_config.block.z) +
                          "; expected positive sizes with at most 1024 threads");
  }
  if (launch_config.grid.x < 1 || launch_config.grid.y < 1 || launch_config.grid.z < 1) {
    throw InvalidArgument("grid shape: got " + std::to_string(launch_config.grid.x) + "x" +
                          std::to_string(launch_config.grid.y) + "x" + std::to_string(launch_config.grid.z) +
                          "; expected positive sizes");
  }
  constexpr std::int64_t kMaxSharedBytes = std::int64_t{256} * 1024;
  if (launch_config.dynamic_shared_bytes < 0 || launch_config.dynamic_shared_bytes > kMaxSharedBytes) {
    throw InvalidArgument("dynamic shared memory: got " + std::to_string(launch_config.dynamic_shared_bytes) +
                          " bytes; expected 0 to 262144");
  }
  const Dim3& cd = launch_config.cluster;
  const std::int64_t ctas = volume(cd);
  if (cd.x < 1 || cd.y < 1 || cd.z < 1 || ctas > 8 || launch_config.grid.x % cd.x != 0 ||
      launch_config.grid.y % cd.y != 0 || launch_config.grid.z % cd.z != 0) {
    throw InvalidArgument("cluster shape: got " + dim3_text(cd) + " for grid " + dim3_text(launch_config.grid) +
                          "; expected positive sizes that divide the grid's, at most 8 blocks (the portable size)");
  }
  if (ctas > 1 && block_threads % sm90::kWarpgroupSize != 0) {
    throw InvalidArgument("cluster launch with " + std::to_string(block_threads) +
                          " threads per block: the emulator runs clusters of whole warpgroups (a multiple of 128)");
  }
  if (g_emulator != nullptr) throw Error("emulator launches cannot nest");
  config = launch_config;
  body = &thread_body;
  reports.clear();
  dropped = 0;
  kernel_exception = nullptr;
  cluster_ctas = static_cast<i32>(ctas);
  cta_threads = static_cast<i32>(block_threads);
  cta_shared = static_cast<u64>(config.dynamic_shared_bytes);
  semaphore_clocks.clear();
  releases = 0;
  // Global write records of earlier launches have other tags; once the tags
  // wrap, an old record could carry this launch's, so all are forgotten.
  if (++launch_tag > GlobalWrites::kLaunchTags) {
    for (auto& [begin, buffer] : buffers) {
      buffer.writes.clear();
      buffer.reductions.clear();
    }
    launch_tag = 1;
  }
  g_emulator = this;
  std::vector<Dim3> origins;  // each cluster's first block
  for (i32 z = 0; z < config.grid.z; z += cd.z)
    for (i32 y = 0; y < config.grid.y; y += cd.y)
      for (i32 x = 0; x < config.grid.x; x += cd.x) origins.push_back({x, y, z});
  std::mt19937_64 order(options.schedule_seed * 0x9E3779B97F4A7C15ULL + launch_tag);
  if (options.schedule_seed != 0) std::shuffle(origins.begin(), origins.end(), order);
  const auto end_launch = [&] {
    g_emulator = nullptr;
    current = nullptr;
    // Units a hang left parked give their fibers back (reset before reuse).
    for (Resident& unit : parked) recycle_fibers(unit);
    parked.clear();
    recycle_fibers(*this);
  };
  try {
    for (const Dim3& origin : origins) {
      start_unit(origin, options.schedule_seed != 0 ? &order : nullptr);
      run_unit();
      resume_parked();
    }
    // Units still waiting for a release no block will make.
    if (!parked.empty()) {
      static_cast<Resident&>(*this) = std::move(parked.back());
      parked.pop_back();
      report_hang();
    }
  } catch (const AbortLaunch&) {
  } catch (...) {
    end_launch();
    throw;
  }
  end_launch();
  if (!reports.empty()) throw KernelFault(reports, dropped);
}

void Emulator::Impl::recycle_fibers(Resident& unit) {
  for (auto& fiber : unit.fibers) spare_fibers.push_back(std::move(fiber));
  unit.fibers.clear();
}

void Emulator::Impl::start_unit(const Dim3& origin, std::mt19937_64* order) {
  const std::size_t unit_threads = static_cast<std::size_t>(cta_threads) * static_cast<std::size_t>(cluster_ctas);
  while (fibers.size() < unit_threads) {
    if (spare_fibers.empty()) {
      fibers.push_back(std::make_unique<Fiber>(options.stack_bytes));
    } else {
      fibers.push_back(std::move(spare_fibers.back()));
      spare_fibers.pop_back();
    }
  }
  threads.assign(unit_threads, Thread{});
  for (i32 i = 0; i < static_cast<i32>(unit_threads); ++i) {
    Thread& t = threads[static_cast<std::size_t>(i)];
    const i32 local = i % cta_threads;
    t.linear = i;
    t.rank = i / cta_threads;
    t.in_cluster = cluster_ctas > 1;
    t.index = {local % config.block.x, (local / config.block.x) % config.block.y,
               local / (config.block.x * config.block.y)};
    t.warp = i / kWarpSize;
    t.lane = i % kWarpSize;
    t.fiber = fibers[static_cast<std::size_t>(i)].get();
  }
  sweep.resize(threads.size());
  for (std::size_t i = 0; i < sweep.size(); ++i) sweep[i] = i;
  if (order != nullptr) std::shuffle(sweep.begin(), sweep.end(), *order);
  shared.resize(static_cast<std::size_t>(cta_shared * static_cast<u64>(cluster_ctas)));
  // Cells of an earlier unit are stale by their block tag (proxy_cell):
  // the table is cleared only when its size changes.
  if (proxy.size() != shared.size()) proxy.assign(shared.size(), ProxyCell{});
  track_clocks = false;
  acquired.assign(static_cast<std::size_t>(cluster_ctas), {});
  epoch.assign(static_cast<std::size_t>(cluster_ctas), 1);
  releases_seen = 0;
  // Rank r of the cluster is block origin + (r % x, r / x % y, r / (x y)), as %cluster_ctarank counts.
  const Dim3& cd = config.cluster;
  for (Thread& t : threads) {
    t.block = {origin.x + t.rank % cd.x, origin.y + t.rank / cd.x % cd.y, origin.z + t.rank / (cd.x * cd.y)};
    const i64 linear =
        t.block.x + static_cast<i64>(config.grid.x) * (t.block.y + static_cast<i64>(config.grid.y) * t.block.z);
    t.block_record = volume(config.grid) <= GlobalWrites::kMaxBlocks ? GlobalWrites::record(launch_tag, linear) : 0;
  }
  std::fill(shared.begin(), shared.end(), static_cast<unsigned char>(0xFF));  // NaN in every float format
  shadow.reset(shared.size());
  proxy_block = ++next_proxy_block;
  async_clock = 0;
  {
    const std::size_t groups = (threads.size() + sm90::kWarpgroupSize - 1) / sm90::kWarpgroupSize;
    const i32 at_entry = std::min<i32>(256, 65536 / cta_threads / 8 * 8);
    warpgroup_registers.assign(groups, at_entry);
    last_increase.assign(groups, {nullptr, Where::current()});
  }
  loads.clear();
  mbarriers.clear();
  named.assign(static_cast<std::size_t>(cluster_ctas), {});
  remote_arrivals.assign(static_cast<std::size_t>(cluster_ctas), {});
  exited.assign(static_cast<std::size_t>(cluster_ctas), false);
  wgmma_ops.assign((threads.size() + sm90::kWarpgroupSize - 1) / sm90::kWarpgroupSize, {});
  pending_shared.assign((threads.size() + kWarpSize - 1) / kWarpSize, {});
  for (Thread& t : threads) {
    t.state = State::kRunnable;
    t.open_group.clear();
    t.committed.clear();
    t.visits.clear();
    t.wgmma_needs_fence = true;
    t.wgmma_commits = 0;
    t.wgmma_retired = 0;
    t.accumulators.clear();
    t.a_operands.clear();
    t.proxy_fences = 0;
    t.next_phase.clear();
    t.open_stores.clear();
    t.committed_stores.clear();
    t.bulk_writes_unfinished = 0;
    t.fiber->reset(&Impl::thread_entry, this);
  }
}

void Emulator::Impl::run_unit() {
  if (advance_unit()) {
    finish_unit();
    recycle_fibers(*this);
    return;
  }
  if (parked.size() + 1 >= options.max_resident_units) {
    report_hang();  // its detail counts the parked units
  }
  parked.push_back(std::move(static_cast<Resident&>(*this)));
  static_cast<Resident&>(*this) = Resident{};
}

void Emulator::Impl::resume_parked() {
  for (;;) {
    const auto next = std::find_if(parked.begin(), parked.end(),
                                   [&](const Resident& unit) { return unit.releases_seen != releases; });
    if (next == parked.end()) return;
    static_cast<Resident&>(*this) = std::move(*next);
    parked.erase(next);
    run_unit();
  }
}

bool Emulator::Impl::wake_semaphores() {
  bool woke = false;
  for (Thread& t : threads) {
    if (t.state != State::kAtSemaphore) continue;
    i32 value = 0;
    std::memcpy(&value, t.semaphore, sizeof value);
    if (value < t.semaphore_target) continue;
    acquire(t, t.semaphore);
    t.state = State::kRunnable;
    woke = true;
  }
  return woke;
}

// Runs the unit until every thread exits (true) or the runnable ones are
// done and some wait on a semaphore (false: the caller parks it).
bool Emulator::Impl::advance_unit() {
  for (;;) {
    bool all_done = true;
    for (const std::size_t i : sweep) {
      Thread& t = threads[i];
      if (t.state == State::kRunnable) {
        current = &t;
        t.fiber->resume();
        current = nullptr;
        if (kernel_exception) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(kernel_exception);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          report(BugKind::kKernelException, t, Where::current(), what);
          throw AbortLaunch{};
        }
        if (t.state == State::kDone && cluster_ctas > 1) check_exit(t.rank);
      }
      all_done = all_done && t.state == State::kDone;
    }
    if (all_done) break;
    // Threads an mbarrier or a named barrier released during the sweep.
    if (std::any_of(threads.begin(), threads.end(), [](const Thread& t) { return t.state == State::kRunnable; })) {
      continue;
    }
    if (land_tma_loads()) continue;
    if (resolve_warps()) continue;
    if (resolve_warpgroups()) continue;
    if (resolve_barrier()) continue;
    if (resolve_cluster_barrier()) continue;
    if (wake_semaphores()) continue;
    if (std::any_of(threads.begin(), threads.end(), [](const Thread& t) { return t.state == State::kAtSemaphore; })) {
      releases_seen = releases;
      return false;
    }
    report_hang();
  }
  return true;
}

// What a unit does once all its threads exited: the checks of its end, and
// the stores and copies nobody waited for.
void Emulator::Impl::finish_unit() {
  flush_all_shared();
  // setmaxnreg.inc waits for registers other warpgroups give back, so the
  // allocation each block ends with must fit the 64K of its multiprocessor.
  const std::size_t block_groups = warpgroup_registers.size() / static_cast<std::size_t>(cluster_ctas);
  for (std::size_t first = 0; first < warpgroup_registers.size(); first += block_groups) {
    i64 total = 0;
    std::string counts;
    for (std::size_t g = first; g < first + block_groups; ++g) {
      total += static_cast<i64>(warpgroup_registers[g]) * sm90::kWarpgroupSize;
      counts += (counts.empty() ? "" : ", ") + std::to_string(warpgroup_registers[g]);
    }
    const auto begin = last_increase.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = begin + static_cast<std::ptrdiff_t>(block_groups);
    const auto last = std::find_if(std::make_reverse_iterator(end), std::make_reverse_iterator(begin),
                                   [](const auto& l) { return l.first != nullptr; });
    if (total > 65536 && last != std::make_reverse_iterator(begin)) {
      report(BugKind::kIllegalRegisterCount, *last->first, last->second,
             "the warpgroups hold " + counts + " registers per thread: " + std::to_string(total) +
                 " registers, more than the 65536 of a block (setmaxnreg.inc would wait for ever)");
    }
  }
  // TMA stores nobody waited for are performed before the block ends.
  for (Thread& t : threads) {
    for (const auto& group : t.committed_stores) {
      for (const TmaStore& store : group) perform_store(t, store);
    }
    for (const TmaStore& store : t.open_stores) perform_store(t, store);
  }
  // Copies nobody waited for still land before the block ends.
  for (Thread& t : threads) {
    for (const auto& group : t.committed) {
      for (const AsyncCopy& c : group) std::memcpy(shared.data() + c.offset, c.data.data(), c.data.size());
    }
  }
}

bool Emulator::Impl::resolve_warps() {
  bool progressed = false;
  const std::size_t warps = (threads.size() + kWarpSize - 1) / kWarpSize;
  for (std::size_t w = 0; w < warps; ++w) {
    Thread* lanes = &threads[w * kWarpSize];
    const std::size_t count = std::min<std::size_t>(kWarpSize, threads.size() - w * kWarpSize);
    if (!std::all_of(lanes, lanes + count, [](const Thread& t) { return t.state == State::kAtWarpOp; })) continue;
    const Thread& first = lanes[0];
    for (std::size_t l = 1; l < count; ++l) {
      if (lanes[l].op != first.op || !same_site(lanes[l].site, first.site) || lanes[l].flag != first.flag ||
          ((first.op == WarpOp::kLdmatrix || first.op == WarpOp::kStmatrix) && lanes[l].operand != first.operand)) {
        report(BugKind::kWarpDivergence, lanes[l], lanes[l].site,
               std::string("lane ") + std::to_string(l) + " is at " + std::string(to_string(lanes[l].op)) + " (" +
                   site_of(lanes[l].site) + ") while lane 0 is at " + std::string(to_string(first.op)) + " (" +
                   site_of(first.site) + ")");
        throw AbortLaunch{};
      }
    }
    if (count != static_cast<std::size_t>(kWarpSize)) {
      report(BugKind::kWarpDivergence, first, first.site,
             std::string(to_string(first.op)) + " in a partial warp of " + std::to_string(count) +
                 " threads: warp collectives need all 32 lanes");
      throw AbortLaunch{};
    }
    flush_shared(w);  // the warp converged: its earlier accesses are whole instructions
    switch (first.op) {
      case WarpOp::kShuffle: {
        ++counters.shuffles;
        std::array<u32, kWarpSize> values{};
        std::array<i32, kWarpSize> operands{};
        for (int l = 0; l < kWarpSize; ++l) {
          values[l] = lanes[l].words[0];
          operands[l] = lanes[l].operand;
        }
        const auto out = shuffle(values, operands, first.flag);
        for (int l = 0; l < kWarpSize; ++l) lanes[l].words[0] = out[l];
        break;
      }
      case WarpOp::kMma: {
        ++counters.mma;
        LaneWords4 a{};
        LaneWords2 b{};
        LaneFloats4 c{};
        for (int l = 0; l < kWarpSize; ++l) {
          a[l] = {lanes[l].words[0], lanes[l].words[1], lanes[l].words[2], lanes[l].words[3]};
          b[l] = lanes[l].b_words;
          c[l] = lanes[l].floats;
        }
        const LaneFloats4 d = mma_m16n8k16(first.flag, a, b, c);
        for (int l = 0; l < kWarpSize; ++l) lanes[l].floats = d[l];
        break;
      }
      case WarpOp::kElect:
        for (int l = 0; l < kWarpSize; ++l) lanes[l].words[0] = l == 0 ? 1U : 0U;  // the lowest lane leads
        break;
      case WarpOp::kLdmatrix: {
        std::array<Matrix8x8, 4> rows{};
        const int matrices = first.operand;
        std::vector<std::uint64_t> row_offsets;
        for (int l = 0; l < 8 * matrices; ++l) {
          Thread& t = lanes[l];
          Matrix8x8& m = rows[static_cast<std::size_t>(l / 8)];
          const auto offset = shared_offset(t, t.address, 16, "read", t.site);
          if (!offset) continue;
          track_shared(t, *offset, 16, /*write=*/false, t.site);
          row_offsets.push_back(*offset);
          std::memcpy(m[static_cast<std::size_t>(l % 8)].data(), t.address, 16);
        }
        add_site(site_of(first.site), ldmatrix_wavefronts(row_offsets));
        ++counters.ldmatrix;
        const auto out = ldmatrix(matrices, first.flag, rows);
        for (int l = 0; l < kWarpSize; ++l) {
          for (int m = 0; m < 4; ++m) lanes[l].words[static_cast<std::size_t>(m)] = out[l][static_cast<std::size_t>(m)];
        }
        break;
      }
      case WarpOp::kStmatrix: {
        // Row r of matrix m is words m of lanes 4 r .. 4 r + 3 (two 16-bit
        // elements each), stored to the address lane 8 m + r gave: a
        // 16-byte store of that lane, checked as one. With .trans the
        // stored row r is column r: element i from lane 4 i + r / 2, the
        // half r % 2 of its word m.
        const int matrices = first.operand;
        for (int l = 0; l < 8 * matrices; ++l) {
          Thread& t = lanes[l];
          const auto m = static_cast<std::size_t>(l / 8);
          const int r = l % 8;
          std::array<u32, 4> row{};
          for (int j = 0; j < 4; ++j) {
            if (first.flag) {
              const auto element = [&](int i) { return (lanes[4 * i + r / 2].words[m] >> (16 * (r % 2))) & 0xFFFFU; };
              row[static_cast<std::size_t>(j)] = element(2 * j) | element(2 * j + 1) << 16;
            } else {
              row[static_cast<std::size_t>(j)] = lanes[4 * r + j].words[m];
            }
          }
          if (check_shared(t, t.address, 16, /*write=*/true, t.site)) {
            std::memcpy(const_cast<void*>(t.address), row.data(), 16);
          }
        }
        break;
      }
    }
    for (std::size_t l = 0; l < count; ++l) lanes[l].state = State::kRunnable;
    progressed = true;
  }
  return progressed;
}

// block::sync, block by block of the cluster.
bool Emulator::Impl::resolve_barrier() {
  bool progressed = false;
  for (i32 r = 0; r < cluster_ctas; ++r) {
    const std::span<Thread> block = threads_of(r);
    // Every thread at one block::sync; one that exited means it never completes.
    const bool ready = std::all_of(block.begin(), block.end(), [&](const Thread& t) {
      return t.state == State::kAtBarrier && same_site(t.site, block.front().site);  // diverged: report_hang explains
    });
    if (!ready) continue;
    shadow.next_epoch();
    flush_all_shared();
    ++counters.barriers;
    if (track_clocks) {
      VectorClock all = fresh_clock();
      for (const Thread& t : block) join(all, t.clock);
      for (Thread& t : block) {
        t.clock = all;
        tick(t);
      }
    }
    for (Thread& t : block) t.state = State::kRunnable;
    progressed = true;
  }
  return progressed;
}

// barrier.cluster completes once every thread of the cluster that has not
// exited waits at one.
bool Emulator::Impl::resolve_cluster_barrier() {
  bool any = false;
  for (const Thread& t : threads) {
    if (t.state != State::kDone && t.state != State::kAtClusterBarrier) return false;
    any = any || t.state == State::kAtClusterBarrier;
  }
  if (!any) return false;
  shadow.next_epoch();
  flush_all_shared();
  ++counters.barriers;
  if (track_clocks) {
    VectorClock all = fresh_clock();
    for (const Thread& t : threads) join(all, t.clock);
    for (Thread& t : threads) {
      if (t.state != State::kAtClusterBarrier) continue;
      t.clock = all;
      tick(t);
    }
  }
  for (Thread& t : threads) {
    if (t.state == State::kAtClusterBarrier) t.state = State::kRunnable;
  }
  return true;
}

void Emulator::Impl::cluster_sync(const Where& where) { wait_here(*current, State::kAtClusterBarrier, where); }

u32 Emulator::Impl::warp_shuffle(u32 value, i32 operand, bool xor_mode, const Where& where) {
  Thread& t = *current;
  t.op = WarpOp::kShuffle;
  t.flag = xor_mode;
  t.operand = operand;
  t.words[0] = value;
  wait_here(t, State::kAtWarpOp, where);
  return t.words[0];
}

void Emulator::Impl::warp_mma(bool bf16, float* d, const u32* a, const u32* b, const float* c, const Where& where) {
  Thread& t = *current;
  t.op = WarpOp::kMma;
  t.flag = bf16;
  std::copy(a, a + 4, t.words.begin());
  t.b_words = {b[0], b[1]};
  std::copy(c, c + 4, t.floats.begin());
  wait_here(t, State::kAtWarpOp, where);
  std::copy(t.floats.begin(), t.floats.end(), d);
}

void Emulator::Impl::warp_ldmatrix(i32 matrices, bool trans, u32* r, const void* row, const Where& where) {
  Thread& t = *current;
  t.op = WarpOp::kLdmatrix;
  t.flag = trans;
  t.operand = matrices;
  t.address = row;
  wait_here(t, State::kAtWarpOp, where);
  std::copy(t.words.begin(), t.words.begin() + matrices, r);
}

void Emulator::Impl::warp_stmatrix(i32 matrices, bool trans, const u32* r, void* row, const Where& where) {
  Thread& t = *current;
  t.op = WarpOp::kStmatrix;
  t.flag = trans;
  t.operand = matrices;
  t.address = row;
  std::copy(r, r + matrices, t.words.begin());
  wait_here(t, State::kAtWarpOp, where);
}

bool Emulator::Impl::warp_elect(const Where& where) {
  Thread& t = *current;
  t.op = WarpOp::kElect;
  t.flag = false;
  wait_here(t, State::kAtWarpOp, where);
  return t.words[0] != 0;
}

}  // namespace attune::emu
