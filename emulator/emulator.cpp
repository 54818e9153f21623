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
#include <source_location>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/tensor_map.h"
#include "emulator/bank_model.h"
#include "emulator/fiber.h"
#include "emulator/shared_shadow.h"
#include "emulator/sync_objects.h"
#include "emulator/warp_ops.h"
#include "emulator/warpgroup_ops.h"
#include "templates/primitives/hopper_emulated.h"

namespace attune::emu {

namespace {

using Where = std::source_location;

enum class State : std::uint8_t {
  kRunnable,
  kAtBarrier,
  kAtWarpOp,
  kAtWarpgroupOp,
  kAtMbarrier,
  kAtNamedBarrier,
  kDone
};
enum class WarpOp : std::uint8_t { kShuffle, kMma, kLdmatrix, kElect };

constexpr NamedValue<WarpOp> kWarpOpNames[] = {{WarpOp::kShuffle, "shfl.sync"},
                                               {WarpOp::kMma, "mma.sync"},
                                               {WarpOp::kLdmatrix, "ldmatrix"},
                                               {WarpOp::kElect, "elect.sync"}};

std::string_view to_string(WarpOp op) { return name_of(kWarpOpNames, op); }

// "templates/flash_tile.cuh:123": the project-relative part of a file name.
std::string site_text(const char* file_name, std::uint_least32_t line) {
  std::string file = file_name;
  // Trim to the project-relative part: templates/..., tests/...
  for (const char* root : {"templates/", "tests/", "emulator/", "bench/"}) {
    const std::size_t at = file.rfind(root);
    if (at != std::string::npos) {
      file = file.substr(at);
      break;
    }
  }
  return file + ":" + std::to_string(line);
}

std::string site_of(const Where& where) { return site_text(where.file_name(), where.line()); }

bool same_site(const Where& a, const Where& b) {
  return a.line() == b.line() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

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
struct TmaStore {
  u64 source = 0;
  TensorMapSpec map;
  std::array<i32, 5> coords{};
  Where site;
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
  Dim3 index;
  i32 linear = 0;
  i32 warp = 0;
  i32 lane = 0;
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
  // TMA stores: the open bulk group, then committed ones oldest first.
  std::vector<TmaStore> open_stores;
  std::deque<std::vector<TmaStore>> committed_stores;
};

struct Buffer {
  std::uintptr_t end;
  std::string name;
};

std::string range_text(std::uint64_t begin, std::uint64_t bytes) {
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + bytes) + ")";
}

std::string thread_text(const Thread& t) {
  return "(" + std::to_string(t.index.x) + "," + std::to_string(t.index.y) + "," + std::to_string(t.index.z) + ")";
}

// "0-63, 96" from sorted linear ids.
std::string id_ranges(const std::vector<i32>& ids) {
  std::string text;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += std::to_string(ids[i]);
    if (j > i) text += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return text;
}

// A hang or an exception ends the launch at once.
struct AbortLaunch {};

}  // namespace

struct Emulator::Impl {
  Options options;
  std::map<std::uintptr_t, Buffer> buffers;  // by start address
  std::vector<std::unique_ptr<Fiber>> fibers;

  // The block being run.
  LaunchConfig config;
  Dim3 block_index;
  std::vector<Thread> threads;
  std::vector<unsigned char> shared;
  SharedShadow shadow;
  // The async proxy (wgmma operands): per shared byte, the last thread that
  // wrote it with an ordinary store and its fence count then; and how many
  // in-flight wgmmas read it.
  // Entries of an earlier block (another `block`) count as empty, so blocks
  // need no reset of this table.
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
  std::vector<ProxyCell> proxy;
  std::uint32_t proxy_block = 0;
  ProxyCell& proxy_cell(u64 i) {
    ProxyCell& cell = proxy[i];
    if (cell.block != proxy_block) cell = ProxyCell{proxy_block};
    return cell;
  }
  std::vector<std::vector<InFlightWgmma>> wgmma_ops;  // per warpgroup, in issue order
  // mbarriers by shared offset, named barriers by id; vector clocks are kept
  // from the first use of either in a launch.
  std::map<u64, Mbarrier> mbarriers;
  std::array<NamedBarrier, kNamedBarriers> named;
  bool track_clocks = false;
  // setmaxnreg: each warpgroup's registers per thread (the kernel's cap at
  // entry to start with: 64K over the block's threads, in steps of 8, at
  // most 256), and the last setmaxnreg.inc of each.
  std::vector<i32> warpgroup_registers;
  std::vector<std::pair<const Thread*, Where>> last_increase;
  std::uint32_t async_clock = 0;  // the async proxy's component
  std::vector<TmaLoad> loads;     // in flight, in issue order
  const std::function<void()>* body = nullptr;
  Thread* current = nullptr;
  std::exception_ptr kernel_exception;

  std::vector<BugReport> reports;
  std::size_t dropped = 0;

  // --- counting, for the speed model ----------------------------------
  LaunchCounters counters;
  // Per warp of the block: the shared accesses of each warp instruction
  // not yet accounted.
  std::vector<std::map<SiteVisit, std::vector<LaneAccess>>> pending_shared;

  void count_shared(Thread& t, u64 offset, u64 bytes, const Where& where) {
    SiteVisit site{where.file_name(), where.line(), where.column(), 0};
    auto it = std::find_if(t.visits.begin(), t.visits.end(), [&](const auto& v) {
      return v.first.file == site.file && v.first.line == site.line && v.first.column == site.column;
    });
    if (it == t.visits.end()) {
      t.visits.push_back({site, 0});
      it = t.visits.end() - 1;
    }
    site.occurrence = it->second++;
    pending_shared[static_cast<std::size_t>(t.warp)][site].push_back(
        LaneAccess{t.lane, offset, static_cast<std::uint32_t>(bytes)});
  }

  void add_site(const std::string& site, const Wavefronts& w) {
    SiteTraffic& s = counters.sites[site];
    s.site = site;
    ++s.instructions;
    s.wavefronts += w.actual;
    s.ideal += w.ideal;
    counters.shared_wavefronts += w.actual;
    counters.shared_ideal += w.ideal;
  }

  // The warp has converged: its pending accesses are complete instructions.
  void flush_shared(std::size_t warp) {
    if (warp >= pending_shared.size()) return;
    for (const auto& [visit, lanes] : pending_shared[warp]) {
      add_site(site_text(visit.file, visit.line), access_wavefronts(lanes));
      ++counters.shared_instructions;
    }
    pending_shared[warp].clear();
    const std::size_t first = warp * kWarpSize;
    for (std::size_t l = first; l < std::min(threads.size(), first + kWarpSize); ++l) threads[l].visits.clear();
  }

  void flush_all_shared() {
    for (std::size_t w = 0; w < pending_shared.size(); ++w) flush_shared(w);
  }

  void report(BugKind kind, const Thread& t, const Where& where, std::string detail) {
    if (reports.size() >= options.max_reports) {
      ++dropped;
      return;
    }
    reports.push_back(BugReport{kind, block_index, t.index, t.warp, t.lane, site_of(where), std::move(detail)});
  }

  // --- memory checks ---------------------------------------------------

  // `alignment` is what the access needs (its size for plain loads and
  // stores, 1 where the caller checks alignment itself).
  bool check_global(const Thread& t, const void* p, u64 bytes, bool write, const Where& where, u64 alignment) {
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
          return false;
        }
        return true;
      }
      // Past the end of the nearest buffer below: say where, relative to it.
      report(BugKind::kGlobalOutOfBounds, t, where,
             std::string(verb) + " of bytes " + range_text(addr - begin, bytes) + " of buffer '" + it->second.name +
                 "', which has " + std::to_string(size) + " bytes");
      return false;
    }
    report(BugKind::kGlobalOutOfBounds, t, where,
           std::string(verb) + " of " + std::to_string(bytes) + " bytes outside every registered buffer");
    return false;
  }

  // Bounds and alignment of a shared access; the offset when it is valid.
  std::optional<u64> shared_offset(const Thread& t, const void* p, u64 bytes, const char* verb, const Where& where) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    const auto base = reinterpret_cast<std::uintptr_t>(shared.data());
    const auto size = static_cast<u64>(config.dynamic_shared_bytes);
    if (addr < base || addr + bytes > base + size) {
      const long long offset = static_cast<long long>(addr) - static_cast<long long>(base);
      report(BugKind::kSharedOutOfBounds, t, where,
             std::string(verb) + " of shared bytes [" + std::to_string(offset) + ", " +
                 std::to_string(offset + static_cast<long long>(bytes)) + ") but the dynamic shared memory has " +
                 std::to_string(size) + " bytes");
      return std::nullopt;
    }
    const u64 offset = addr - base;
    if (bytes > 1 && offset % std::min<u64>(bytes, 16) != 0) {
      report(BugKind::kSharedOutOfBounds, t, where,
             std::string("misaligned ") + verb + " of " + std::to_string(bytes) + " bytes at shared byte " +
                 std::to_string(offset));
      return std::nullopt;
    }
    return offset;
  }

  // Race and in-flight-copy checks of a valid shared access.
  void track_shared(const Thread& t, u64 offset, u64 bytes, bool write, const Where& where) {
    const auto conflict = shadow.access(t.linear, offset, bytes, write);
    if (!conflict) return;
    const Thread& other = threads[static_cast<std::size_t>(conflict->other_thread)];
    const char* verb = write ? "write" : "read";
    if (conflict->kind == SharedShadow::Conflict::Kind::kPendingAsyncCopy) {
      report(BugKind::kAsyncCopyReadBeforeWait, t, where,
             std::string(verb) + " of shared bytes " + range_text(offset, bytes) + ": byte " +
                 std::to_string(conflict->offset) + " is the destination of a cp.async by thread " +
                 thread_text(other) + " whose group has not been waited on (cp_async::wait)");
      return;
    }
    report(BugKind::kSharedRace, t, where,
           std::string(verb) + " of shared bytes " + range_text(offset, bytes) + " races with a " +
               (conflict->other_wrote ? "write" : "read") + " of byte " + std::to_string(conflict->offset) +
               " by thread " + thread_text(other) + " since the last barrier");
  }

  bool check_shared(Thread& t, const void* p, u64 bytes, bool write, const Where& where) {
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
  void generic_write(const Thread& t, u64 offset, u64 bytes, const Where& where) {
    for (u64 i = offset; i < offset + bytes; ++i) {
      if (proxy_cell(i).async_readers != 0) {
        report(BugKind::kAsyncProxyOrder, t, where,
               "write of shared bytes " + range_text(offset, bytes) + ": byte " + std::to_string(i) +
                   " is an operand of a wgmma still in flight (wgmma::wait has not covered it)");
        break;
      }
    }
    for (u64 i = offset; i < offset + bytes; ++i) {
      const ProxyCell& cell = proxy_cell(i);
      if (track_clocks && cell.async_reader >= 0 &&
          t.clock[static_cast<std::size_t>(cell.async_reader)] < cell.async_read_clock) {
        report(BugKind::kAsyncProxyOrder, t, where,
               "write of shared bytes " + range_text(offset, bytes) + ": byte " + std::to_string(i) +
                   " was read by a wgmma or TMA store of thread " +
                   thread_text(threads[static_cast<std::size_t>(cell.async_reader)]) +
                   ", with no happens-before from that read to this write (it may have read the old bytes)");
        break;
      }
    }
    for (u64 i = offset; i < offset + bytes; ++i) {
      ProxyCell& cell = proxy_cell(i);
      cell.writer = t.linear;
      cell.fences_at_write = t.proxy_fences;
      cell.write_clock = track_clocks ? t.clock[static_cast<std::size_t>(t.linear)] : 0;
    }
  }

  // Bytes a TMA load writes are the thread's to touch only once the phase
  // that completed the load happens before (a wait, or a barrier after a
  // thread that waited).
  void check_async_visible(const Thread& t, u64 offset, u64 bytes, const char* what, const Where& where) {
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

  // --- TMA -----------------------------------------------------------------

  bool tma_map(const Thread& t, const TensorMap* map, i32 rank, const Where& where, TensorMapSpec* spec) {
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
  std::optional<u64> tma_box(const Thread& t, const void* smem, const TensorMapSpec& spec, const char* what,
                             const Where& where) {
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

  void land(TmaLoad& load) {
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
  bool land_tma_loads() {
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

  void perform_store(const Thread& t, const TmaStore& store) {
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
      if (check_global(t, global, elem, true, store.site, 1)) std::memcpy(global, shared.data() + at, elem);
    });
  }

  // --- mbarriers and named barriers -------------------------------------

  VectorClock fresh_clock() const { return VectorClock(threads.size() + 1, 0); }
  void start_clocks() {
    if (track_clocks) return;
    track_clocks = true;
    for (Thread& t : threads) {
      t.clock = fresh_clock();
      t.clock[static_cast<std::size_t>(t.linear)] = 1;
    }
  }
  void tick(Thread& t) {
    if (track_clocks) ++t.clock[static_cast<std::size_t>(t.linear)];
  }

  Mbarrier* barrier_at(Thread& t, const u64* bar, const char* what, const Where& where, u64* offset_out) {
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

  void observe(Thread& t, u64 offset, Mbarrier& b, i64 phase) {
    if (phase >= 0 && track_clocks) join(t.clock, b.completed[static_cast<std::size_t>(phase & 1)]);
    t.next_phase[offset] = phase + 1;
    b.newest_observed = std::max(b.newest_observed, phase);
  }

  // Completes the phase once no arrival and no transaction byte is missing,
  // and hands it to the threads waiting for it.
  void maybe_complete(u64 offset, Mbarrier& b) {
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

  void arrive(Thread& t, u64 offset, Mbarrier& b, u32 tx_bytes, const Where& where) {
    if (b.phase >= 1 && b.newest_observed < b.phase - 1) {
      report(BugKind::kMbarrierMisuse, t, where,
             "arrival on phase " + std::to_string(b.phase) + " of the mbarrier at shared byte " +
                 std::to_string(offset) + ", but phase " + std::to_string(b.phase - 1) +
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
  void complete_tx(Thread& issuer, u64 offset, Mbarrier& b, i64 bytes, const Where& where) {
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

  void named_barrier(Thread& t, i32 id, i32 count, bool sync, const Where& where) {
    if (id < 0 || id >= kNamedBarriers || count <= 0 || count % kWarpSize != 0 ||
        count > static_cast<i32>(threads.size())) {
      report(BugKind::kBarrierDivergence, t, where,
             "named barrier " + std::to_string(id) + " for " + std::to_string(count) +
                 " threads: expected an id in 0..15 and a multiple of 32 up to the block's " +
                 std::to_string(threads.size()) + " threads");
      throw AbortLaunch{};
    }
    start_clocks();
    NamedBarrier& n = named[static_cast<std::size_t>(id)];
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

  // --- wgmma -------------------------------------------------------------

  bool resolve_warpgroups();
  void issue_wgmma(std::size_t warpgroup);
  void execute_wgmma(std::size_t warpgroup, InFlightWgmma& op);
  void retire_wgmmas(Thread& t, i32 pending, const Where& where);

  // --- cp.async --------------------------------------------------------

  void land(Thread& t, const std::vector<AsyncCopy>& group, const Where& where) {
    for (const AsyncCopy& copy : group) {
      shadow.clear_pending(copy.offset, copy.data.size());
      track_shared(t, copy.offset, copy.data.size(), /*write=*/true, where);
      std::memcpy(shared.data() + copy.offset, copy.data.data(), copy.data.size());
    }
  }

  // --- scheduling --------------------------------------------------------

  void wait_here(Thread& t, State state, const Where& where) {
    t.state = state;
    t.site = where;
    t.fiber->yield();
  }

  static void thread_entry(void* arg) {
    auto* self = static_cast<Emulator::Impl*>(arg);
    Thread& t = *self->current;
    try {
      (*self->body)();
    } catch (...) {
      if (!self->kernel_exception) self->kernel_exception = std::current_exception();
    }
    t.state = State::kDone;
  }

  void run_block(const Dim3& index);
  bool resolve_warps();
  bool resolve_barrier();
  [[noreturn]] void report_hang();
};

thread_local Emulator::Impl* g_emulator = nullptr;

namespace {

Emulator::Impl& emulator() {
  if (g_emulator == nullptr || g_emulator->current == nullptr) {
    throw Error("a device primitive was called outside an emulator launch");
  }
  return *g_emulator;
}

}  // namespace

void Emulator::Impl::run_block(const Dim3& index) {
  block_index = index;
  std::fill(shared.begin(), shared.end(), static_cast<unsigned char>(0xFF));  // NaN in every float format
  shadow.reset(shared.size());
  ++proxy_block;
  async_clock = 0;
  {
    const std::size_t groups = (threads.size() + sm90::kWarpgroupSize - 1) / sm90::kWarpgroupSize;
    const i32 at_entry = std::min<i32>(256, static_cast<i32>(65536 / threads.size()) / 8 * 8);
    warpgroup_registers.assign(groups, at_entry);
    last_increase.assign(groups, {nullptr, Where::current()});
  }
  loads.clear();
  mbarriers.clear();
  named = {};
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
    if (track_clocks) {
      t.clock = fresh_clock();
      t.clock[static_cast<std::size_t>(t.linear)] = 1;
    }
    t.fiber->reset(&Impl::thread_entry, this);
  }
  for (;;) {
    bool all_done = true;
    for (Thread& t : threads) {
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
    report_hang();
  }
  flush_all_shared();
  // setmaxnreg.inc waits for registers other warpgroups give back, so the
  // allocation the block ends with must fit the 64K of the multiprocessor.
  {
    i64 total = 0;
    std::string counts;
    for (const i32 r : warpgroup_registers) {
      total += static_cast<i64>(r) * sm90::kWarpgroupSize;
      counts += (counts.empty() ? "" : ", ") + std::to_string(r);
    }
    const auto last =
        std::find_if(last_increase.rbegin(), last_increase.rend(), [](const auto& l) { return l.first != nullptr; });
    if (total > 65536 && last != last_increase.rend()) {
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
          (first.op == WarpOp::kLdmatrix && lanes[l].operand != first.operand)) {
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
    }
    for (std::size_t l = 0; l < count; ++l) lanes[l].state = State::kRunnable;
    progressed = true;
  }
  return progressed;
}

bool Emulator::Impl::resolve_barrier() {
  const Thread* first = nullptr;
  for (const Thread& t : threads) {
    if (t.state == State::kDone) continue;
    if (t.state != State::kAtBarrier) return false;
    if (first == nullptr) first = &t;
    if (!same_site(t.site, first->site)) return false;  // diverged: report_hang explains
  }
  if (first == nullptr) return false;
  if (std::any_of(threads.begin(), threads.end(), [](const Thread& t) { return t.state == State::kDone; })) {
    return false;  // some threads exited: the barrier can never complete
  }
  shadow.next_epoch();
  flush_all_shared();
  ++counters.barriers;
  if (track_clocks) {
    VectorClock all = fresh_clock();
    for (const Thread& t : threads) join(all, t.clock);
    for (Thread& t : threads) {
      t.clock = all;
      tick(t);
    }
  }
  for (Thread& t : threads) t.state = State::kRunnable;
  return true;
}

void Emulator::Impl::report_hang() {
  // Group the stuck threads by where they wait.
  std::vector<std::pair<std::string, std::vector<i32>>> groups;
  const Thread* culprit = nullptr;
  bool warp_problem = false;
  bool warpgroup_problem = false;
  bool deadlock = false;
  for (const Thread& t : threads) {
    std::string where;
    switch (t.state) {
      case State::kDone:
        where = "exited";
        break;
      case State::kAtBarrier:
        where = "waiting at block::sync (" + site_of(t.site) + ")";
        if (culprit == nullptr) culprit = &t;
        break;
      case State::kAtWarpOp:
        where = "waiting at " + std::string(to_string(t.op)) + " (" + site_of(t.site) + ")";
        warp_problem = true;
        culprit = &t;
        break;
      case State::kAtMbarrier:
        where = "waiting on the mbarrier at shared byte " + std::to_string(t.wait_offset) + " for phase " +
                std::to_string(t.wait_phase) + " (" + site_of(t.site) + ")";
        deadlock = true;
        culprit = &t;
        break;
      case State::kAtNamedBarrier:
        where = "waiting at named barrier " + std::to_string(t.wait_named) + " (" + site_of(t.site) + ")";
        deadlock = true;
        culprit = &t;
        break;
      case State::kAtWarpgroupOp:
        where = std::string(t.wgmma.wait ? "waiting at wgmma::wait (" : "waiting at wgmma (") + site_of(t.site) + ")";
        warpgroup_problem = true;
        culprit = &t;
        break;
      case State::kRunnable:
        where = "runnable";
        break;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == where; });
    if (it == groups.end()) {
      groups.push_back({where, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(t.linear);
  }
  std::string detail = "the block can never continue:";
  for (const auto& [where, ids] : groups) detail += " threads " + id_ranges(ids) + " " + where + ";";
  detail.pop_back();
  for (const auto& [offset, b] : mbarriers) {
    detail += "; mbarrier at shared byte " + std::to_string(offset) + ": " + describe(b);
  }
  for (i32 id = 0; id < kNamedBarriers; ++id) {
    const NamedBarrier& n = named[static_cast<std::size_t>(id)];
    if (n.arrived > 0) {
      detail += "; named barrier " + std::to_string(id) + ": " + std::to_string(n.arrived) + " of " +
                std::to_string(n.expected) + " threads arrived";
    }
  }
  const Thread& t = culprit != nullptr ? *culprit : threads.front();
  const BugKind kind = deadlock            ? BugKind::kDeadlock
                       : warpgroup_problem ? BugKind::kWgmmaDivergence
                       : warp_problem      ? BugKind::kWarpDivergence
                                           : BugKind::kBarrierDivergence;
  report(kind, t, t.site, detail);
  throw AbortLaunch{};
}

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

namespace {

std::string shape_text(const WgmmaShape& s) {
  std::string text = std::string("m64n") + std::to_string(s.n) + "k16 " + (s.bf16 ? "bf16" : "f16") +
                     (s.a_in_registers ? " A in registers" : " A " + std::string(s.trans_a ? "MN" : "K") + "-major") +
                     " B " + (s.trans_b ? "MN" : "K") + "-major";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, " desc_a 0x%llx desc_b 0x%llx", static_cast<unsigned long long>(s.desc_a),
                static_cast<unsigned long long>(s.desc_b));
  return text + buffer;
}

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
  op.addresses = wgmma_operand_addresses(op.shape);
  const u64 size = shared.size();
  for (const u32 address : op.addresses) {
    if (address + 2 > size) {
      report(BugKind::kSharedOutOfBounds, first, first.site,
             "wgmma " + shape_text(op.shape) + " reads shared bytes [" + std::to_string(address) + ", " +
                 std::to_string(address + 2) + ") but the dynamic shared memory has " + std::to_string(size) +
                 " bytes");
      throw AbortLaunch{};
    }
  }
  bool unfenced_reported = false;
  for (const u32 address : op.addresses) {
    for (u32 i = address; i < address + 2; ++i) {
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
    check_async_visible(group[0], address, 2, "wgmma operand read", first.site);
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
  counters.wgmma_flops += 2ULL * sm90::kWgmmaM * static_cast<std::uint64_t>(op.shape.n) * sm90::kWgmmaK;
  wgmma_ops[warpgroup].push_back(std::move(op));
}

void Emulator::Impl::execute_wgmma(std::size_t warpgroup, InFlightWgmma& op) {
  Thread* group = &threads[warpgroup * sm90::kWarpgroupSize];
  std::vector<std::vector<float>> acc(sm90::kWarpgroupSize);
  for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) {
    acc[static_cast<std::size_t>(l)] = group[l].accumulators.at(op.d[static_cast<std::size_t>(l)]).values;
  }
  // Shared memory is read now, as late as the ISA allows.
  const auto read_u16 = [&](u32 address) {
    u16 bits = 0;
    std::memcpy(&bits, shared.data() + address, 2);
    return bits;
  };
  wgmma_compute(op.shape, read_u16, op.a_values, op.accumulate, acc);
  for (i32 l = 0; l < sm90::kWarpgroupSize; ++l) {
    group[l].accumulators.at(op.d[static_cast<std::size_t>(l)]).values = std::move(acc[static_cast<std::size_t>(l)]);
  }
  const Thread& reader = group[0];
  if (track_clocks) op.read_clock = reader.clock[static_cast<std::size_t>(reader.linear)];
  for (const u32 address : op.addresses) {
    for (u32 i = address; i < address + 2; ++i) {
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

Emulator::Emulator() : Emulator(Options{}) {}

Emulator::Emulator(Options options) : impl_(std::make_unique<Impl>()) { impl_->options = options; }

Emulator::~Emulator() = default;

void Emulator::register_buffer(std::string name, const void* data, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  impl_->buffers[begin] = Buffer{begin + bytes, std::move(name)};
}

const LaunchCounters& Emulator::counters() const { return impl_->counters; }

void Emulator::unregister_buffer(const void* data) { impl_->buffers.erase(reinterpret_cast<std::uintptr_t>(data)); }

void Emulator::launch(const LaunchConfig& config, const std::function<void()>& thread_body) {
  Impl& s = *impl_;
  const std::int64_t block_threads = volume(config.block);
  if (config.block.x < 1 || config.block.y < 1 || config.block.z < 1 || block_threads > 1024) {
    throw InvalidArgument("block shape: got " + std::to_string(config.block.x) + "x" + std::to_string(config.block.y) +
                          "x" + std::to_string(config.block.z) + "; expected positive sizes with at most 1024 threads");
  }
  if (config.grid.x < 1 || config.grid.y < 1 || config.grid.z < 1) {
    throw InvalidArgument("grid shape: got " + std::to_string(config.grid.x) + "x" + std::to_string(config.grid.y) +
                          "x" + std::to_string(config.grid.z) + "; expected positive sizes");
  }
  constexpr std::int64_t kMaxSharedBytes = std::int64_t{256} * 1024;
  if (config.dynamic_shared_bytes < 0 || config.dynamic_shared_bytes > kMaxSharedBytes) {
    throw InvalidArgument("dynamic shared memory: got " + std::to_string(config.dynamic_shared_bytes) +
                          " bytes; expected 0 to 262144");
  }
  if (g_emulator != nullptr) throw Error("emulator launches cannot nest");
  s.config = config;
  s.body = &thread_body;
  s.reports.clear();
  s.dropped = 0;
  s.kernel_exception = nullptr;
  s.shared.assign(static_cast<std::size_t>(config.dynamic_shared_bytes), 0);
  s.proxy.assign(s.shared.size(), Impl::ProxyCell{});
  s.proxy_block = 0;
  s.track_clocks = false;
  while (s.fibers.size() < static_cast<std::size_t>(block_threads)) {
    s.fibers.push_back(std::make_unique<Fiber>(s.options.stack_bytes));
  }
  s.threads.assign(static_cast<std::size_t>(block_threads), Thread{});
  for (i32 i = 0; i < static_cast<i32>(block_threads); ++i) {
    Thread& t = s.threads[static_cast<std::size_t>(i)];
    t.linear = i;
    t.index = {i % config.block.x, (i / config.block.x) % config.block.y, i / (config.block.x * config.block.y)};
    t.warp = i / kWarpSize;
    t.lane = i % kWarpSize;
    t.fiber = s.fibers[static_cast<std::size_t>(i)].get();
  }
  g_emulator = &s;
  try {
    for (i32 z = 0; z < config.grid.z; ++z)
      for (i32 y = 0; y < config.grid.y; ++y)
        for (i32 x = 0; x < config.grid.x; ++x) s.run_block({x, y, z});
  } catch (const AbortLaunch&) {
  } catch (...) {
    g_emulator = nullptr;
    throw;
  }
  g_emulator = nullptr;
  s.current = nullptr;
  if (!s.reports.empty()) throw KernelFault(s.reports, s.dropped);
}

// --- the hooks the emulated primitives call ---------------------------------

namespace hooks {

Dim3 thread_index() { return emulator().current->index; }
Dim3 block_index() { return emulator().block_index; }
Dim3 block_dim() { return emulator().config.block; }
Dim3 grid_dim() { return emulator().config.grid; }
unsigned char* shared_base() { return emulator().shared.data(); }

bool global_access(const void* p, u64 bytes, bool write, const Where& where) {
  Emulator::Impl& e = emulator();
  e.counters.global_bytes += bytes;
  return e.check_global(*e.current, p, bytes, write, where, std::min<u64>(bytes, 16));
}

bool shared_access(const void* p, u64 bytes, bool write, const Where& where) {
  Emulator::Impl& e = emulator();
  return e.check_shared(*e.current, p, bytes, write, where);
}

void barrier(const Where& where) {
  Emulator::Impl& e = emulator();
  e.wait_here(*e.current, State::kAtBarrier, where);
}

u32 shfl(u32 value, i32 operand, bool xor_mode, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.op = WarpOp::kShuffle;
  t.flag = xor_mode;
  t.operand = operand;
  t.words[0] = value;
  e.wait_here(t, State::kAtWarpOp, where);
  return t.words[0];
}

void mma_m16n8k16(bool bf16, float* d, const u32* a, const u32* b, const float* c, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.op = WarpOp::kMma;
  t.flag = bf16;
  std::copy(a, a + 4, t.words.begin());
  t.b_words = {b[0], b[1]};
  std::copy(c, c + 4, t.floats.begin());
  e.wait_here(t, State::kAtWarpOp, where);
  std::copy(t.floats.begin(), t.floats.end(), d);
}

void ldmatrix(i32 matrices, bool trans, u32* r, const void* row, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.op = WarpOp::kLdmatrix;
  t.flag = trans;
  t.operand = matrices;
  t.address = row;
  e.wait_here(t, State::kAtWarpOp, where);
  std::copy(t.words.begin(), t.words.begin() + matrices, r);
}

void cp_async(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  const auto offset = e.shared_offset(t, shared_dst, 16, "cp.async write", where);
  if (!offset) return;
  AsyncCopy copy{*offset, {}};
  if (src_bytes < 0 || src_bytes > 16) {
    e.report(BugKind::kGlobalOutOfBounds, t, where,
             "cp.async source size " + std::to_string(src_bytes) + " outside 0..16");
    return;
  }
  if (src_bytes > 0 && e.check_global(t, global_src, static_cast<u64>(src_bytes), /*write=*/false, where, 1)) {
    if (reinterpret_cast<std::uintptr_t>(global_src) % 16 != 0) {
      e.report(BugKind::kGlobalOutOfBounds, t, where, "cp.async source not 16-byte aligned");
    }
    std::memcpy(copy.data.data(), global_src, static_cast<std::size_t>(src_bytes));  // the rest is zero-fill
  }
  e.counters.global_bytes += static_cast<u64>(src_bytes);
  // A new copy onto bytes still in flight, or onto bytes others use, is a race.
  e.track_shared(t, *offset, 16, /*write=*/true, where);
  e.generic_write(t, *offset, 16, where);
  e.count_shared(t, *offset, 16, where);
  e.shadow.mark_pending(t.linear, *offset, 16);
  t.open_group.push_back(copy);
}

void cp_async_commit(const Where& /*where*/) {
  Thread& t = *emulator().current;
  t.committed.push_back(std::move(t.open_group));
  t.open_group.clear();
}

void cp_async_wait(i32 pending, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  // Land the oldest groups until at most `pending` remain in flight: copies
  // land as late as the ISA allows.
  while (t.committed.size() > static_cast<std::size_t>(pending)) {
    e.land(t, t.committed.front(), where);
    t.committed.pop_front();
  }
}

void atomic_add(float* p, float value, const Where& where) {
  Emulator::Impl& e = emulator();
  if (!e.check_global(*e.current, p, sizeof(float), /*write=*/true, where, sizeof(float))) return;
  float old = 0;
  std::memcpy(&old, p, sizeof(float));
  old += value;
  std::memcpy(p, &old, sizeof(float));
}

void wgmma_fence(const Where& /*where*/) { emulator().current->wgmma_needs_fence = false; }

void wgmma_commit(const Where& /*where*/) { ++emulator().current->wgmma_commits; }

void wgmma_wait(i32 pending, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.wgmma.wait = true;
  t.wgmma.pending = pending;
  e.wait_here(t, State::kAtWarpgroupOp, where);
}

void wgmma(bool bf16, i32 n, bool trans_a, bool trans_b, u64 desc_a, u64 desc_b, u32* a_registers, float* d,
           i32 accumulate, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.wgmma.wait = false;
  t.wgmma.shape = WgmmaShape{bf16, n, trans_a, trans_b, a_registers != nullptr, desc_a, desc_b};
  t.wgmma.d = d;
  t.wgmma.a = a_registers;
  t.wgmma.accumulate = accumulate;
  e.wait_here(t, State::kAtWarpgroupOp, where);
}

void fence_proxy_async(const Where& /*where*/) { ++emulator().current->proxy_fences; }

void in_flight_value_stored(const Where& where) {
  Emulator::Impl& e = emulator();
  e.report(BugKind::kWgmmaOperandInFlight, *e.current, where,
           "stores 0x7FBADBAD, the NaN a wgmma accumulator holds while the wgmma is in flight: it was read before "
           "the wgmma::wait that covers it");
}

void setmaxnreg(bool increase, i32 registers, const Where& where) {
  Emulator::Impl& e = emulator();
  const Thread& t = *e.current;
  const char* op = increase ? "setmaxnreg.inc " : "setmaxnreg.dec ";
  if (registers < 24 || registers > 256 || registers % 8 != 0) {
    e.report(BugKind::kIllegalRegisterCount, t, where,
             op + std::to_string(registers) + ": expected a multiple of 8 in 24..256");
    return;
  }
  // A warpgroup collective: its thread 0 speaks for it.
  if (t.linear % sm90::kWarpgroupSize != 0) return;
  const auto group = static_cast<std::size_t>(t.linear / sm90::kWarpgroupSize);
  i32& current = e.warpgroup_registers[group];
  if (increase ? registers < current : registers > current) {
    e.report(BugKind::kIllegalRegisterCount, t, where,
             op + std::to_string(registers) + " from " + std::to_string(current) + " registers per thread: an " +
                 (increase ? "increase must not lower" : "decrease must not raise") + " the count");
    return;
  }
  current = registers;
  if (increase) e.last_increase[group] = {&t, where};
}

void mbarrier_init(u64* bar, i32 count, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  const auto offset = e.shared_offset(t, bar, 8, "mbarrier::init", where);
  if (!offset) return;
  e.start_clocks();
  Mbarrier& b = e.mbarriers[*offset];
  if (b.initialized) {
    e.report(BugKind::kMbarrierMisuse, t, where,
             "mbarrier::init of the mbarrier at shared byte " + std::to_string(*offset) +
                 ", which is initialised already (" + describe(b) + ")");
  }
  if (count < 1 || count > (1 << 20) - 1) {
    e.report(BugKind::kMbarrierMisuse, t, where,
             "mbarrier::init with count " + std::to_string(count) + ": expected 1..1048575");
    return;
  }
  b = Mbarrier{};
  b.initialized = true;
  b.count = count;
  b.pending = count;
  b.arrivals = e.fresh_clock();
}

void mbarrier_arrive(u64* bar, u32 tx_bytes, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  u64 offset = 0;
  if (Mbarrier* b = e.barrier_at(t, bar, "arrive", where, &offset)) e.arrive(t, offset, *b, tx_bytes, where);
}

void mbarrier_expect_tx(u64* bar, u32 tx_bytes, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  u64 offset = 0;
  if (Mbarrier* b = e.barrier_at(t, bar, "expect_tx", where, &offset)) b->tx += tx_bytes;
}

void mbarrier_wait(u64* bar, u32 parity, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  u64 offset = 0;
  Mbarrier* b = e.barrier_at(t, bar, "wait", where, &offset);
  if (b == nullptr) return;
  const i64 phase = waited_phase(b->phase, parity);
  const auto known = t.next_phase.find(offset);
  const i64 expected = known == t.next_phase.end() ? -1 : known->second;
  if (phase < expected) {
    e.report(BugKind::kMbarrierMisuse, t, where,
             "wait with parity " + std::to_string(parity & 1U) + " on the mbarrier at shared byte " +
                 std::to_string(offset) + " is for phase " + std::to_string(phase) +
                 ", which this thread saw complete already: it returns at once (a wrong parity; the barrier is at " +
                 describe(*b) + ")");
    return;
  }
  if (phase < b->phase) {
    e.observe(t, offset, *b, phase);
    return;
  }
  t.wait_offset = offset;
  t.wait_phase = phase;
  e.wait_here(t, State::kAtMbarrier, where);
}

void mbarrier_invalidate(u64* bar, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  u64 offset = 0;
  if (Mbarrier* b = e.barrier_at(t, bar, "invalidate", where, &offset)) b->initialized = false;
}

void named_barrier(i32 id, i32 threads, bool sync, const Where& where) {
  Emulator::Impl& e = emulator();
  e.named_barrier(*e.current, id, threads, sync, where);
}

bool elect_one(const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  t.op = WarpOp::kElect;
  t.flag = false;
  e.wait_here(t, State::kAtWarpOp, where);
  return t.words[0] != 0;
}

void tma_load(void* smem, const TensorMap* map, u64* bar, const i32* coords, i32 rank, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  TmaLoad load;
  if (!e.tma_map(t, map, rank, where, &load.map)) return;
  const auto destination = e.tma_box(t, smem, load.map, "TMA load destination", where);
  if (!destination) return;
  Mbarrier* b = e.barrier_at(t, bar, "TMA load onto", where, &load.barrier);
  if (b == nullptr) return;
  load.destination = *destination;
  std::copy(coords, coords + rank, load.coords.begin());
  load.issuer = t.linear;
  load.issuer_clock = t.clock;
  load.site = where;
  // The tensor's bytes are a registered buffer's, one check per row.
  const u64 elem = static_cast<u64>(load.map.element_bytes);
  bool global_ok = true;
  for_each_box_element(load.map, load.coords, [&](u64 /*box_byte*/, const void* global) {
    if (global_ok && global != nullptr) global_ok = e.check_global(t, global, elem, false, where, 1);
  });
  // The destination: not read by an in-flight wgmma or TMA store, not
  // filled by another load, and released by its last wgmma reader.
  std::string problem;
  for_each_box_element(load.map, load.coords, [&](u64 box_byte, const void* /*global*/) {
    const u64 at = sm90::swizzle_address(load.map.swizzle, static_cast<u32>(load.destination + box_byte));
    for (u64 i = at; i < at + elem; ++i) {
      Emulator::Impl::ProxyCell& cell = e.proxy_cell(i);
      if (problem.empty() && cell.async_readers != 0) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", which an in-flight wgmma or TMA store reads";
      } else if (problem.empty() && cell.tma_pending != 0) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", which another TMA load still fills";
      } else if (problem.empty() && e.track_clocks && cell.async_reader >= 0 &&
                 t.clock[static_cast<std::size_t>(cell.async_reader)] < cell.async_read_clock) {
        problem = "TMA load onto shared byte " + std::to_string(i) + ", read by the wgmma of thread " +
                  thread_text(e.threads[static_cast<std::size_t>(cell.async_reader)]) +
                  " with no happens-before from that read to this load (the consumer's release of the stage is "
                  "missing)";
      }
      ++cell.tma_pending;
    }
  });
  if (!problem.empty()) e.report(BugKind::kAsyncProxyOrder, t, where, problem);
  ++b->loads_in_flight;
  e.loads.push_back(std::move(load));
}

void tma_store(const TensorMap* map, const void* smem, const i32* coords, i32 rank, const Where& where) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  TmaStore store;
  if (!e.tma_map(t, map, rank, where, &store.map)) return;
  const auto source = e.tma_box(t, smem, store.map, "TMA store source", where);
  if (!source) return;
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
      Emulator::Impl::ProxyCell& cell = e.proxy_cell(i);
      const i32 w = cell.writer;
      if (problem.empty() && w >= 0 && e.threads[static_cast<std::size_t>(w)].proxy_fences == cell.fences_at_write) {
        problem = "TMA store reads shared byte " + std::to_string(i) + ", written by thread " +
                  thread_text(e.threads[static_cast<std::size_t>(w)]) +
                  " with an ordinary store and no fence.proxy.async since";
      } else if (problem.empty() && w >= 0 && w != t.linear && e.track_clocks &&
                 t.clock[static_cast<std::size_t>(w)] < cell.write_clock) {
        problem = "TMA store reads shared byte " + std::to_string(i) + ", written by thread " +
                  thread_text(e.threads[static_cast<std::size_t>(w)]) +
                  " with no happens-before to this store (a barrier between the writes and the store)";
      }
      ++cell.async_readers;
    }
  });
  if (!problem.empty()) e.report(BugKind::kAsyncProxyOrder, t, where, problem);
  t.open_stores.push_back(store);
}

void tma_commit(const Where& /*where*/) {
  Thread& t = *emulator().current;
  t.committed_stores.push_back(std::move(t.open_stores));
  t.open_stores.clear();
}

void tma_wait_read(i32 pending, const Where& /*where*/) {
  Emulator::Impl& e = emulator();
  Thread& t = *e.current;
  while (t.committed_stores.size() > static_cast<std::size_t>(pending)) {
    for (const TmaStore& store : t.committed_stores.front()) e.perform_store(t, store);
    t.committed_stores.pop_front();
  }
}

void tma_prefetch(const TensorMap* map, const Where& where) {
  Emulator::Impl& e = emulator();
  TensorMapSpec spec;
  if (!decode_emulated_tensor_map(*map, &spec)) {
    e.report(BugKind::kTmaMisuse, *e.current, where,
             "prefetch of a tensor map the emulator did not make (encode_emulated_tensor_map)");
  }
}

float half_to_float(u16 bits) { return half_bits_to_float(bits); }
u16 float_to_half(float value) { return float_to_half_bits(value); }
u16 float_to_bfloat16(float value) { return float_to_bfloat16_bits(value); }

float exp2_approx(float value) {
  if (g_emulator != nullptr) ++g_emulator->counters.ex2;
  // ex2.approx.ftz: subnormal inputs and results flush to zero.
  if (std::fpclassify(value) == FP_SUBNORMAL) value = 0.0F;
  const float result = std::exp2(value);
  return std::fpclassify(result) == FP_SUBNORMAL ? 0.0F : result;
}

float tanh_approx(float value) {
  if (g_emulator != nullptr) ++g_emulator->counters.tanh;
  // tanh.approx.f32 (sm_75+): about 11 bits; the emulator gives the exact
  // value, which the accuracy rule's bound covers.
  return std::tanh(value);
}

float log2_approx(float value) {
  // lg2.approx.ftz: a subnormal input counts as zero (result -inf).
  if (std::fpclassify(value) == FP_SUBNORMAL) value = 0.0F;
  return std::log2(value);
}

}  // namespace hooks

}  // namespace attune::emu
