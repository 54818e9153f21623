// The emulator's machine, shared by its units: the state of one launch (the
// block being run, its threads, shared memory and the async proxy's view of
// it, the synchronization objects) and the rules each unit implements on it.
// Internal to emulator/: the primitives reach it only through
// templates/primitives/hopper_emulated.h's hooks (emulator/hooks.cpp).
//
// Each unit, what it models, and its tests (tests/emulator/):
//   scheduler.cpp      fibers, warp collectives, block barriers, hangs,  scheduler_test, primitives_test
//                      resident units parked on semaphores
//   memory_checks.cpp  bounds, alignment, races, async-proxy order       memory_checks_test
//   cp_async.cpp       cp.async groups                                   cp_async_test
//   tma.cpp            TMA loads and stores                              tma_test
//   barriers.cpp       mbarriers, named barriers, vector clocks          barriers_test
//   wgmma.cpp          the wgmma pipeline and setmaxnreg                 wgmma_test
//   global_order.cpp   reductions, semaphores between blocks              global_order_test
//   counting.cpp       shared traffic per site, for the speed model      counting_test
//   diagnostics.cpp    report text                                       diagnostics_test
//   hooks.cpp          the primitives' entry points: forwarding only
#pragma once

#include "emulator/emulator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/tensor_map.h"
#include "emulator/bank_model.h"
#include "emulator/fiber.h"
#include "emulator/global_writes.h"
#include "emulator/shared_shadow.h"
#include "emulator/sync_objects.h"
#include "emulator/warp_ops.h"
#include "emulator/warpgroup_ops.h"
#include "templates/primitives/hopper_emulated.h"

namespace attune::emu {
using Where = std::source_location;

enum class State : std::uint8_t {
  kRunnable,
  kAtBarrier,
  kAtWarpOp,
  kAtWarpgroupOp,
  kAtMbarrier,
  kAtNamedBarrier,
  kAtClusterBarrier,
  kAtSemaphore,
  kDone
};
enum class WarpOp : std::uint8_t { kShuffle, kMma, kLdmatrix, kStmatrix, kElect };

std::string_view to_string(WarpOp op);

// "templates/flash_tile.cuh:123": the project-relative part of a file name.
std::string site_text(const char* file_name, std::uint_least32_t line);
std::string site_of(const Where& where);
bool same_site(const Where& a, const Where& b);

struct AsyncCopy {
  std::uint64_t offset;  // in shared memory
  std::array<unsigned char, 16> data;
};

// One warp instruction's shared accesses are grouped by where they come from
// and how many times this lane has been there since the warp last
// converged (a barrier or a warp collective): the k-th execution of a line
// by each lane is one instruction of the warp.
struct SiteVisit {
  const char* file;
  std::uint_least32_t line;
  std::uint_least32_t column;
  std::uint32_t occurrence;
  bool operator<(const SiteVisit& o) const {
    return std::tie(file, line, column, occurrence) < std::tie(o.file, o.line, o.column, o.occurrence);
  }
};

// A NaN with a payload of its own: what an accumulator or register A operand
// holds while its wgmma is in flight, so a read propagates NaN, a float store
// of it is reported, and a write is seen at the wait.
using hooks::kInFlightPoison;

// What a thread brings to a wgmma rendezvous.
struct WgmmaIssue {
  bool wait = false;  // wgmma.wait_group (pending), else wgmma.mma_async
  i32 pending = 0;
  WgmmaShape shape;
  float* d = nullptr;
  u32* a = nullptr;
  i32 accumulate = 0;
};

// One wgmma issued by a warpgroup, until every thread has waited for it.
struct InFlightWgmma {
  WgmmaShape shape;
  i32 group = 0;  // the commit group: a thread's k-th commit closes group k
  bool accumulate = false;
  bool executed = false;
  std::vector<float*> d;  // per thread of the warpgroup
  std::vector<u32*> a;    // per thread; empty for a shared A
  WarpgroupARegisters a_values{};
  std::vector<u32> addresses;  // shared elements its operands read
  Where site;
  // The reading thread's own clock component when shared memory was read:
  // a thread whose wgmma::wait covers the wgmma has seen the read complete.
  std::uint32_t read_clock = 0;
};

// A thread's register array (accumulator or A) while wgmmas use it: the
// values the wgmmas read and write, and how many are in flight.
template <class T>
struct InFlightRegisters {
  std::vector<T> values;
  i32 in_flight = 0;
};

// A TMA load issued and not landed yet, and a TMA store not yet performed.
struct TmaLoad {
  u64 barrier = 0;      // shared offset of its mbarrier
  u64 destination = 0;  // shared offset of the box
  TensorMapSpec map;
  std::array<i32, 5> coords{};
  i32 issuer = 0;
  VectorClock issuer_clock;
  Where site;
};
// A bulk tensor store or reduction (cp.reduce.async.bulk.tensor .add, f32).
enum class BulkWrite : std::uint8_t { kStore, kAdd, kOrderedAdd };
struct TmaStore {
  u64 source = 0;
  TensorMapSpec map;
  std::array<i32, 5> coords{};
  Where site;
  BulkWrite kind = BulkWrite::kStore;
};

// Calls `element(box_byte, global_address_or_null)` for every element of a
// box in order (null: outside the tensor), innermost dimension first.
template <class F>
void for_each_box_element(const TensorMapSpec& m, const std::array<i32, 5>& coords, F element) {
  std::array<std::uint32_t, 5> box{1, 1, 1, 1, 1};
  for (int d = 0; d < m.rank; ++d) box[static_cast<std::size_t>(d)] = m.box[static_cast<std::size_t>(d)];
  // Stores write through the map: its address is the tensor, not a constant.
  auto* base = const_cast<unsigned char*>(static_cast<const unsigned char*>(m.address));
  u64 linear = 0;
  for (std::uint32_t i4 = 0; i4 < box[4]; ++i4)
    for (std::uint32_t i3 = 0; i3 < box[3]; ++i3)
      for (std::uint32_t i2 = 0; i2 < box[2]; ++i2)
        for (std::uint32_t i1 = 0; i1 < box[1]; ++i1)
          for (std::uint32_t i0 = 0; i0 < box[0]; ++i0, ++linear) {
            const std::array<std::uint32_t, 5> index{i0, i1, i2, i3, i4};
            bool inside = true;
            i64 offset = 0;
            for (int d = 0; d < m.rank; ++d) {
              const i64 g = static_cast<i64>(coords[static_cast<std::size_t>(d)]) + index[static_cast<std::size_t>(d)];
              if (g < 0 || static_cast<u64>(g) >= m.dims[static_cast<std::size_t>(d)]) inside = false;
              const u64 step = d == 0 ? static_cast<u64>(m.element_bytes) : m.strides[static_cast<std::size_t>(d - 1)];
              offset += g * static_cast<i64>(step);
            }
            element(linear * static_cast<u64>(m.element_bytes), inside ? static_cast<void*>(base + offset) : nullptr);
          }
}

struct Thread {
  Dim3 index;  // in its block
  Dim3 block;  // its block in the grid
  // Over the cluster being run (its blocks' threads one after another):
  // the thread, its warp, its block's rank in the cluster.
  i32 linear = 0;
  i32 warp = 0;
  i32 lane = 0;
  i32 rank = 0;
  bool in_cluster = false;         // the launch has clusters of more than one block
  std::uint32_t block_record = 0;  // its block in the buffers' write records (0: a grid too large to check)
  Fiber* fiber = nullptr;
  State state = State::kRunnable;
  Where site;
  // Operands and results of the warp collective this thread waits at.
  WarpOp op = WarpOp::kShuffle;
  bool flag = false;  // shfl: xor mode; mma: bf16; ldmatrix: trans
  i32 operand = 0;    // shfl: lane or mask; ldmatrix: matrices
  std::array<u32, 4> words{};
  std::array<u32, 2> b_words{};  // mma's B fragment
  std::array<float, 4> floats{};
  const void* address = nullptr;
  // cp.async groups: the open one, then committed ones oldest first.
  std::vector<AsyncCopy> open_group;
  std::deque<std::vector<AsyncCopy>> committed;
  // Times at each shared-access site since the warp last converged.
  std::vector<std::pair<SiteVisit, std::uint32_t>> visits;
  // wgmma: the issue at a rendezvous, this thread's view of its warpgroup's
  // pipeline, and its registers in flight.
  WgmmaIssue wgmma;
  bool wgmma_needs_fence = true;  // at the start and after every wait that retired a wgmma
  i32 wgmma_commits = 0;
  std::size_t wgmma_retired = 0;  // of its warpgroup's wgmmas, in issue order
  std::map<float*, InFlightRegisters<float>> accumulators;
  std::map<u32*, InFlightRegisters<u32>> a_operands;
  std::uint32_t proxy_fences = 0;  // fence.proxy.async executed
  // Happens-before (once the block uses mbarriers or named barriers), the
  // next phase of each mbarrier it has not seen complete yet (-1 before its
  // first wait), and what it waits for.
  VectorClock clock;
  std::map<u64, i64> next_phase;
  u64 wait_offset = 0;
  i64 wait_phase = 0;
  i32 wait_named = 0;
  // A semaphore wait (semaphore_wait): the counter and the value it waits for.
  const i32* semaphore = nullptr;
  i32 semaphore_target = 0;
  // TMA stores: the open bulk group, then committed ones oldest first.
  std::vector<TmaStore> open_stores;
  std::deque<std::vector<TmaStore>> committed_stores;
  // Groups a wait_group.read let go of: their global writes may not be
  // complete until a wait_group (not .read) covers them.
  i32 bulk_writes_unfinished = 0;
};

struct Buffer {
  std::uintptr_t begin;
  std::uintptr_t end;
  std::string name;
  GlobalWrites writes;          // which block of the launch wrote each byte
  GlobalReductions reductions;  // which thread of which block last added to each word, and when
};

std::string range_text(std::uint64_t begin, std::uint64_t bytes);
std::string thread_text(const Thread& t);
std::string dim3_text(const Dim3& d);  // "(x,y,z)"
// "0-63, 96" from sorted linear ids.
std::string id_ranges(const std::vector<i32>& ids);
std::string shape_text(const WgmmaShape& s);

// A hang or an exception ends the launch at once.
struct AbortLaunch {};

// The async proxy's view of one shared byte (wgmma operands, TMA): the last
// thread that wrote it with an ordinary store and its fence count then; and
// how many in-flight wgmmas read it. Entries of an earlier block (another
// `block`) count as empty, so blocks need no reset of the table.
struct ProxyCell {
  std::uint32_t block = 0;
  i32 writer = -1;                    // last ordinary store
  std::uint32_t fences_at_write = 0;  // the writer's fence.proxy.async count then
  std::uint32_t write_clock = 0;      // the writer's own clock then
  std::uint32_t async_readers = 0;    // in-flight wgmmas and TMA stores reading it
  std::uint32_t tma_pending = 0;      // TMA loads that will write it
  std::uint32_t async_write = 0;      // the async proxy's clock when a TMA load wrote it (0: never)
  i32 async_reader = -1;              // the last wgmma's warpgroup thread 0, at its wait
  std::uint32_t async_read_clock = 0;
};

// Remote arrivals into a block of the cluster, by arriving thread (its
// latest: its own clock component then, the barrier, the site). When the
// block's last thread exits, every one must happen before that exit, or the
// block may be gone when it lands.
struct RemoteArrival {
  std::uint32_t clock = 0;
  u64 offset = 0;
  Where site;
};

// The state of one resident unit (a cluster, or a block without clusters):
// its threads and their fibers, its shared memory and the async proxy's view
// of it, its synchronization objects. The unit being run is the emulator's
// own (Emulator::Impl derives from Resident); a unit whose threads wait on a
// global semaphore another block releases is parked, whole, while other
// blocks run (Options::max_resident_units), as blocks are resident together
// on a GPU.
struct Resident {
  std::vector<std::unique_ptr<Fiber>> fibers;  // one per thread
  // The order the scheduler sweeps the threads in (Options::schedule_seed).
  std::vector<std::size_t> sweep;
  // Its blocks run together (one block when the launch has no clusters),
  // their threads one after another in `threads` and their shared memories
  // one after another in `shared`, so block r's shared byte b is byte
  // r * cta_shared + b of the cluster's.
  std::vector<Thread> threads;
  std::vector<unsigned char> shared;
  SharedShadow shadow;
  // The async proxy (wgmma operands): per shared byte; see ProxyCell.
  std::vector<ProxyCell> proxy;
  std::uint32_t proxy_block = 0;
  // setmaxnreg: each warpgroup's registers per thread (the kernel's cap at
  // entry to start with: 64K over the block's threads, in steps of 8, at
  // most 256), and the last setmaxnreg.inc of each.
  std::vector<i32> warpgroup_registers;
  std::vector<std::pair<const Thread*, Where>> last_increase;
  std::uint32_t async_clock = 0;  // the async proxy's component
  std::vector<TmaLoad> loads;     // in flight, in issue order
  // Per warp of the block: the shared accesses of each warp instruction
  // not yet accounted.
  std::vector<std::map<SiteVisit, std::vector<LaneAccess>>> pending_shared;
  std::vector<std::vector<InFlightWgmma>> wgmma_ops;  // per warpgroup, in issue order
  // mbarriers by shared offset, named barriers by id; vector clocks are kept
  // from the first use of either in the unit.
  std::map<u64, Mbarrier> mbarriers;
  std::vector<std::array<NamedBarrier, kNamedBarriers>> named;  // per block of the cluster
  bool track_clocks = false;
  std::vector<std::map<i32, RemoteArrival>> remote_arrivals;  // per rank
  std::vector<bool> exited;                                   // per rank: its exit was checked
  // Happens-before between blocks, per rank: what the block has acquired of
  // other blocks' epochs (global semaphores), and its own epoch.
  std::vector<BlockClock> acquired;
  std::vector<std::uint32_t> epoch;
  // Semaphore releases of the launch when this unit last ran (a parked unit
  // runs again once there are more).
  std::uint64_t releases_seen = 0;
};

struct Emulator::Impl : Resident {
  Options options;
  std::map<std::uintptr_t, Buffer> buffers;  // by start address
  // This launch's tag in the buffers' write records.
  std::uint32_t launch_tag = 0;

  // The launch: its clusters (one block each without clusters).
  LaunchConfig config;
  i32 cluster_ctas = 1;
  i32 cta_threads = 0;
  u64 cta_shared = 0;
  // Fibers of units that finished, for the next.
  std::vector<std::unique_ptr<Fiber>> spare_fibers;
  // Units parked on a semaphore (the running one is *this's Resident).
  std::vector<Resident> parked;
  // Global semaphores: what their releases published, and how many
  // releases the launch has made.
  struct SemaphoreClock {
    BlockClock blocks;    // the releasing blocks' epochs and what they had acquired
    u32 unit = 0;         // the unit of the latest releases (proxy_block)
    VectorClock threads;  // the releasing threads' clocks, for threads of that unit
  };
  std::map<std::uintptr_t, SemaphoreClock> semaphore_clocks;
  std::uint64_t releases = 0;
  std::uint32_t next_proxy_block = 0;
  u64 cta_base(i32 rank) const { return static_cast<u64>(rank) * cta_shared; }
  // The same shared byte in block `to` as `offset` in block `from` (mapa).
  u64 in_block(u64 offset, i32 from, i32 to) const { return offset - cta_base(from) + cta_base(to); }
  // Block `rank`'s threads, and whether every one has exited.
  std::span<Thread> threads_of(i32 rank) {
    return {threads.data() + static_cast<std::ptrdiff_t>(rank) * cta_threads, static_cast<std::size_t>(cta_threads)};
  }
  bool block_exited(i32 rank) {
    const std::span<Thread> block = threads_of(rank);
    return std::all_of(block.begin(), block.end(), [](const Thread& x) { return x.state == State::kDone; });
  }
  ProxyCell& proxy_cell(u64 i) {
    ProxyCell& cell = proxy[i];
    if (cell.block != proxy_block) cell = ProxyCell{proxy_block};
    return cell;
  }
  const std::function<void()>* body = nullptr;
  Thread* current = nullptr;
  std::exception_ptr kernel_exception;

  std::vector<BugReport> reports;
  std::size_t dropped = 0;

  // --- counting, for the speed model ----------------------------------
  LaunchCounters counters;

  void count_shared(Thread& t, u64 offset, u64 bytes, const Where& where);
  void add_site(const std::string& site, const Wavefronts& w);
  // The warp has converged: its pending accesses are complete instructions.
  void flush_shared(std::size_t warp);
  void flush_all_shared();

  // --- diagnostics (diagnostics.cpp) ------------------------------------
  void report(BugKind kind, const Thread& t, const Where& where, std::string detail);
  [[noreturn]] void report_hang();
  // "byte 40 of buffer 'dq_semaphore'" for a registered global address.
  std::string global_text(const void* p) const;

  // --- memory checks (memory_checks.cpp) --------------------------------
  // `alignment` is what the access needs (its size for plain loads and
  // stores, 1 where the caller checks alignment itself).
  bool check_global(const Thread& t, const void* p, u64 bytes, bool write, const Where& where, u64 alignment) {
    return global_buffer(t, p, bytes, write, where, alignment) != nullptr;
  }
  // The same check; the buffer the access is in when it is valid.
  Buffer* global_buffer(const Thread& t, const void* p, u64 bytes, bool write, const Where& where, u64 alignment);
  // An ordinary or TMA store of the running block (not an atomic): bytes
  // another block of the launch wrote are reported.
  void record_global_write(const Thread& t, Buffer& buffer, const void* p, u64 bytes, const Where& where);
  // Bounds and alignment of a shared access; the offset when it is valid.
  std::optional<u64> shared_offset(const Thread& t, const void* p, u64 bytes, const char* verb, const Where& where);
  // Race and in-flight-copy checks of a valid shared access.
  void track_shared(const Thread& t, u64 offset, u64 bytes, bool write, const Where& where);
  bool check_shared(Thread& t, const void* p, u64 bytes, bool write, const Where& where);
  void generic_write(const Thread& t, u64 offset, u64 bytes, const Where& where);
  void check_async_visible(const Thread& t, u64 offset, u64 bytes, const char* what, const Where& where);
  bool global_access(const void* p, u64 bytes, bool write, const Where& where);
  void atomic_add(float* p, float value, bool ordered, const Where& where);
  i32 atomic_fetch_add(i32* p, i32 value, const Where& where);

  // --- reductions and semaphores between blocks (global_order.cpp) -------
  // Whether the access `r` recorded happens before the running thread now:
  // within its unit by the threads' vector clocks, between blocks by the
  // epochs semaphores carry.
  bool happens_before(const Thread& t, const GlobalReductions::Record& r) const;
  // A float reduction of `bytes` at `p` in `buffer` by the running thread:
  // a plain store of another block, or (for an ordered add) an earlier add
  // that does not happen before it, is reported.
  void record_reduction(const Thread& t, Buffer& buffer, const void* p, u64 bytes, bool ordered, const Where& where);
  // A plain read or store of bytes a reduction of the launch changed, with
  // nothing ordering the two, is reported.
  void check_against_reductions(const Thread& t, Buffer& buffer, const void* p, u64 bytes, bool write,
                                const Where& where);
  void semaphore_wait(const i32* p, i32 target, const Where& where);
  void semaphore_release(i32* p, i32 value, const Where& where);
  void acquire(Thread& t, const i32* p);
  bool wake_semaphores();

  // --- TMA (tma.cpp) ----------------------------------------------------
  bool tma_map(const Thread& t, const TensorMap* map, i32 rank, const Where& where, TensorMapSpec* spec);
  std::optional<u64> tma_box(const Thread& t, const void* smem, const TensorMapSpec& spec, const char* what,
                             const Where& where);
  void land(TmaLoad& load);
  // Lands the loads whose mbarriers have every arrival: called when no
  // thread can run, the latest moment the ISA allows.
  bool land_tma_loads();
  void perform_store(const Thread& t, const TmaStore& store);
  void tma_load(void* smem, const TensorMap* map, u64* bar, const i32* coords, i32 rank, const Where& where);
  // The same box into the same shared bytes of every block in `cta_mask`
  // (bit r: rank r), each completing its own block's mbarrier there.
  void tma_load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, const i32* coords, i32 rank,
                          const Where& where);
  // One block's copy of a load (the issuer's own, or a multicast's).
  void issue_load(Thread& t, const TmaLoad& prototype, u64 destination, u64 barrier_offset, Mbarrier& b,
                  const Where& where);
  void tma_store(const TensorMap* map, const void* smem, const i32* coords, i32 rank, const Where& where,
                 BulkWrite kind = BulkWrite::kStore);
  void tma_commit();
  void tma_wait_read(i32 pending);
  // cp.async.bulk.wait_group: the groups' writes complete too.
  void tma_wait(i32 pending);
  void tma_prefetch(const TensorMap* map, const Where& where);

  // --- mbarriers and named barriers (barriers.cpp) ----------------------
  VectorClock fresh_clock() const { return VectorClock(threads.size() + 1, 0); }
  void start_clocks();
  void tick(Thread& t) {
    if (track_clocks) ++t.clock[static_cast<std::size_t>(t.linear)];
  }
  Mbarrier* barrier_at(Thread& t, const u64* bar, const char* what, const Where& where, u64* offset_out);
  void observe(Thread& t, u64 offset, Mbarrier& b, i64 phase);
  // Completes the phase once no arrival and no transaction byte is missing,
  // and hands it to the threads waiting for it.
  void maybe_complete(u64 offset, Mbarrier& b);
  void arrive(Thread& t, u64 offset, Mbarrier& b, u32 tx_bytes, const Where& where);
  // Transaction bytes a TMA load completed on the barrier.
  void complete_tx(Thread& issuer, u64 offset, Mbarrier& b, i64 bytes, const Where& where);
  void named_barrier(Thread& t, i32 id, i32 count, bool sync, const Where& where);
  void mbarrier_init(u64* bar, i32 count, const Where& where);
  void mbarrier_arrive(u64* bar, u32 tx_bytes, const Where& where);
  void mbarrier_expect_tx(u64* bar, u32 tx_bytes, const Where& where);
  void mbarrier_wait(u64* bar, u32 parity, const Where& where);
  void mbarrier_invalidate(u64* bar, const Where& where);
  // Distributed shared memory: the offset of the same shared byte in block
  // `cta` of the cluster (mapa), checked; the arrival of the running thread
  // on the mbarrier there (mbarrier.arrive.shared::cluster).
  std::optional<u64> peer_offset(Thread& t, u64 own, i32 cta, const char* what, const Where& where);
  // The peer's mbarrier at `offset`, for a thread of another block: its
  // init must happen before (fence.mbarrier_init, then cluster::sync), and
  // its block must not have exited.
  Mbarrier* peer_barrier(Thread& t, u64 offset, i32 cta, const char* what, const Where& where);
  void mbarrier_arrive_cluster(u64* bar, i32 cta, const Where& where);
  void check_exit(i32 rank);
  // barrier.cluster.arrive + wait: every thread of the cluster that has not
  // exited.
  void cluster_sync(const Where& where);
  bool resolve_cluster_barrier();

  // --- wgmma and setmaxnreg (wgmma.cpp) ---------------------------------
  bool resolve_warpgroups();
  void issue_wgmma(std::size_t warpgroup);
  void execute_wgmma(std::size_t warpgroup, InFlightWgmma& op);
  void retire_wgmmas(Thread& t, i32 pending, const Where& where);
  void wgmma(const WgmmaShape& shape, u32* a_registers, float* d, i32 accumulate, const Where& where);
  void wgmma_wait(i32 pending, const Where& where);
  // The running thread's wgmma.fence, commit_group and fence.proxy.async:
  // what later checks compare against.
  void wgmma_fence() { current->wgmma_needs_fence = false; }
  void wgmma_commit() { ++current->wgmma_commits; }
  void fence_proxy_async() { ++current->proxy_fences; }
  void setmaxnreg(bool increase, i32 registers, const Where& where);
  void in_flight_value_stored(const Where& where);

  // --- cp.async (cp_async.cpp) ------------------------------------------
  void cp_async(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where);
  void cp_async_commit();
  void cp_async_wait(i32 pending, const Where& where);
  void land(Thread& t, const std::vector<AsyncCopy>& group, const Where& where);

  // --- scheduling (scheduler.cpp) ---------------------------------------
  void wait_here(Thread& t, State state, const Where& where) {
    t.state = state;
    t.site = where;
    t.fiber->yield();
  }
  static void thread_entry(void* arg);
  void launch(const LaunchConfig& launch_config, const std::function<void()>& thread_body);
  // Makes the cluster whose first block is `origin` (a block, without
  // clusters) the running unit; `order` shuffles its sweep (null: by index).
  void start_unit(const Dim3& origin, std::mt19937_64* order);
  // Runs the running unit until it exits (finish_unit) or waits on a
  // semaphore (parked), and the parked units a release may have woken.
  void run_unit();
  bool advance_unit();
  void finish_unit();
  void resume_parked();
  void recycle_fibers(Resident& unit);
  bool resolve_warps();
  bool resolve_barrier();
  // Warp collectives: the thread parks at the rendezvous, resolve_warps
  // computes the warp's results.
  u32 warp_shuffle(u32 value, i32 operand, bool xor_mode, const Where& where);
  void warp_mma(bool bf16, float* d, const u32* a, const u32* b, const float* c, const Where& where);
  void warp_ldmatrix(i32 matrices, bool trans, u32* r, const void* row, const Where& where);
  void warp_stmatrix(i32 matrices, bool trans, const u32* r, void* row, const Where& where);
  bool warp_elect(const Where& where);
};

// The launch running on this thread (null outside one: hooks.cpp).
extern constinit thread_local Emulator::Impl* g_emulator;
[[noreturn]] void throw_outside_launch();
// The launch running on this thread; throws outside a launch.
inline Emulator::Impl& running_emulator() {
  if (g_emulator == nullptr || g_emulator->current == nullptr) [[unlikely]]
    throw_outside_launch();
  return *g_emulator;
}

}  // namespace attune::emu
