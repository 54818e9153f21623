// Report text: where a bug is (template line, thread), what the machine
// holds when a block can never continue.
#include "emulator/machine.h"

namespace attune::emu {

constexpr NamedValue<WarpOp> kWarpOpNames[] = {{WarpOp::kShuffle, "shfl.sync"},
                                               {WarpOp::kMma, "mma.sync"},
                                               {WarpOp::kLdmatrix, "ldmatrix"},
                                               {WarpOp::kStmatrix, "stmatrix"},
                                               {WarpOp::kElect, "elect.sync"}};

std::string_view to_string(WarpOp op) { return name_of(kWarpOpNames, op); }

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

std::string range_text(std::uint64_t begin, std::uint64_t bytes) {
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + bytes) + ")";
}

std::string dim3_text(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string thread_text(const Thread& t) {
  return t.in_cluster ? dim3_text(t.index) + " of block " + dim3_text(t.block) : dim3_text(t.index);
}

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

std::string shape_text(const WgmmaShape& s) {
  const char* type = s.fp8 == 1 ? "e4m3" : s.fp8 == 2 ? "e5m2" : s.bf16 ? "bf16" : "f16";
  std::string text = std::string("m64n") + std::to_string(s.n) + "k" + std::to_string(wgmma_k(s)) + " " + type +
                     (s.a_in_registers ? " A in registers" : " A " + std::string(s.trans_a ? "MN" : "K") + "-major") +
                     " B " + (s.trans_b ? "MN" : "K") + "-major";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, " desc_a 0x%llx desc_b 0x%llx", static_cast<unsigned long long>(s.desc_a),
                static_cast<unsigned long long>(s.desc_b));
  return text + buffer;
}

void Emulator::Impl::report(BugKind kind, const Thread& t, const Where& where, std::string detail) {
  if (reports.size() >= options.max_reports) {
    ++dropped;
    return;
  }
  const i32 warp = (t.linear - t.rank * cta_threads) / kWarpSize;  // in its block
  reports.push_back(BugReport{kind, t.block, t.index, warp, t.lane, site_of(where), std::move(detail)});
}

std::string Emulator::Impl::global_text(const void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = buffers.upper_bound(addr);
  if (it == buffers.begin()) return "an unregistered address";
  --it;
  return "byte " + std::to_string(addr - it->first) + " of buffer '" + it->second.name + "'";
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
      case State::kAtSemaphore: {
        i32 value = 0;
        std::memcpy(&value, t.semaphore, sizeof value);
        where = "waiting on the semaphore at " + global_text(t.semaphore) + " for at least " +
                std::to_string(t.semaphore_target) + " (it holds " + std::to_string(value) + ") (" + site_of(t.site) +
                ")";
        deadlock = true;
        culprit = &t;
        break;
      }
      case State::kAtClusterBarrier:
        where = "waiting at cluster::sync (" + site_of(t.site) + ")";
        if (culprit == nullptr) culprit = &t;
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
  std::string detail = "the block " + dim3_text(threads.front().block) + " can never continue:";
  for (const auto& [where, ids] : groups) detail += " threads " + id_ranges(ids) + " " + where + ";";
  detail.pop_back();
  for (const auto& [offset, b] : mbarriers) {
    detail += "; mbarrier at shared byte " + std::to_string(offset) + ": " + describe(b);
  }
  for (std::size_t r = 0; r < named.size(); ++r) {
    for (i32 id = 0; id < kNamedBarriers; ++id) {
      const NamedBarrier& n = named[r][static_cast<std::size_t>(id)];
      if (n.arrived > 0) {
        detail += "; named barrier " + std::to_string(id) + (named.size() > 1 ? " of rank " + std::to_string(r) : "") +
                  ": " + std::to_string(n.arrived) + " of " + std::to_string(n.expected) + " threads arrived";
      }
    }
  }
  if (!parked.empty()) {
    detail += "; " + std::to_string(parked.size()) + " other block(s) resident, waiting on semaphores (at most " +
              std::to_string(options.max_resident_units) + " at once)";
  }
  const Thread& t = culprit != nullptr ? *culprit : threads.front();
  const BugKind kind = deadlock            ? BugKind::kDeadlock
                       : warpgroup_problem ? BugKind::kWgmmaDivergence
                       : warp_problem      ? BugKind::kWarpDivergence
                                           : BugKind::kBarrierDivergence;
  report(kind, t, t.site, detail);
  throw AbortLaunch{};
}

}  // namespace attune::emu
