#include "profile/sass_audit.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attune::profile {

namespace {

struct Instruction {
  int function = 0;  // index into the function names
  int address = 0;
  std::string mnemonic;  // "HGMMA.64x128x16.F32.BF16"
  std::string opcode;    // "HGMMA"
  std::string operands;
  std::string target;    // a branch's label, if any
  bool guarded = false;  // under a predicate (@P0, @!P1): it may fall through
};

struct Listing {
  std::vector<std::string> functions;
  std::vector<Instruction> instructions;
  std::unordered_map<std::string, int> labels;  // label -> index of the instruction it names
};

Listing parse(std::string_view sass) {
  // "        /*0120*/                   @!P0 BRA `(.L_x_12) ;"
  static const std::regex kInstruction(
      R"(^\s*/\*([0-9a-fA-F]+)\*/\s+(@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)\s*([^;]*);)");
  static const std::regex kLabel(R"(^(\.L_x_[0-9]+):)");
  static const std::regex kFunction(R"(^\.text\.([^:\s]+):)");
  static const std::regex kTarget(R"(`\((\.L_x_[0-9]+)\))");
  Listing out;
  std::vector<std::string> pending;  // labels waiting for their instruction
  std::istringstream lines{std::string(sass)};
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, m, kFunction)) {
      out.functions.push_back(m[1]);
    } else if (std::regex_search(line, m, kLabel)) {
      pending.push_back(m[1]);
    } else if (std::regex_search(line, m, kInstruction)) {
      if (out.functions.empty()) out.functions.emplace_back();
      Instruction i;
      i.function = static_cast<int>(out.functions.size()) - 1;
      i.address = std::stoi(m[1], nullptr, 16);
      i.guarded = m[2].matched && m[2].str().rfind("@PT", 0) != 0;  // @PT always runs
      i.opcode = m[3];
      i.mnemonic = m[3].str() + m[4].str();
      i.operands = m[5];
      if (std::smatch t; std::regex_search(i.operands, t, kTarget)) i.target = t[1];
      for (const std::string& label : pending) out.labels[label] = static_cast<int>(out.instructions.size());
      pending.clear();
      out.instructions.push_back(std::move(i));
    }
  }
  return out;
}

// The highest general register an instruction names (R0..R254; RZ is not one).
int highest_register(const std::string& operands) {
  int highest = -1;
  for (std::size_t at = operands.find('R'); at != std::string::npos; at = operands.find('R', at + 1)) {
    const bool starts_token = at == 0 || !(std::isalnum(static_cast<unsigned char>(operands[at - 1])) != 0);
    if (!starts_token || at + 1 >= operands.size() || std::isdigit(static_cast<unsigned char>(operands[at + 1])) == 0) {
      continue;
    }
    highest = std::max(highest, std::stoi(operands.substr(at + 1)));
  }
  return highest;
}

// The count USETMAXREG sets: its last operand ("USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0").
int register_limit(const std::string& operands) {
  const std::size_t at = operands.rfind("0x");
  return at == std::string::npos ? 0 : std::stoi(operands.substr(at + 2), nullptr, 16);
}

std::string class_of(const Instruction& i) {
  if (i.opcode == "MUFU") return i.mnemonic.rfind("MUFU.EX2", 0) == 0 ? "MUFU.EX2" : "";
  if (i.opcode == "ISETP") return i.mnemonic.find(".EX") != std::string::npos ? "ISETP.EX" : "";
  if (i.opcode == "SYNCS") return "BAR";
  for (const char* c : {"FMNMX", "FSETP", "FSEL", "FFMA", "FMUL", "FADD", "SHFL", "BAR", "STL", "LDL"}) {
    if (i.opcode == c) return c;
  }
  return "";
}

// Tensor-core instructions: warpgroup (HGMMA 16-bit, QGMMA 8-bit) and warp (HMMA).
bool is_mma(const Instruction& i) { return i.opcode == "HGMMA" || i.opcode == "QGMMA" || i.opcode == "HMMA"; }

// Whether control can go on to the next instruction: not after an
// unconditional branch, exit or return.
bool falls_through(const Instruction& i) {
  const bool ends =
      (i.opcode == "BRA" && i.operands.find(',') == std::string::npos) || i.opcode == "EXIT" || i.opcode == "RET";
  return !ends || i.guarded;
}

// Marks the blocks `edges` lead to from `work`, not going past a marked one.
void mark_along(std::vector<std::size_t> work, const std::vector<std::vector<std::size_t>>& edges,
                std::vector<bool>& marked) {
  while (!work.empty()) {
    const std::size_t b = work.back();
    work.pop_back();
    if (marked[b]) continue;
    marked[b] = true;
    for (std::size_t next : edges[b]) work.push_back(next);
  }
}

// The control-flow graph of a listing: basic blocks (leaders are function
// starts, branch targets and what follows a branch, exit or return), their
// edges within a function, and their dominators.
struct Cfg {
  std::vector<std::size_t> first;  // block -> its first instruction
  std::vector<std::size_t> last;   // block -> its last instruction
  std::vector<std::vector<std::size_t>> succ, pred;
  std::vector<std::vector<bool>> dom;  // dom[b][d]: d dominates b
  std::vector<std::ptrdiff_t> depth;   // dominators of a block, itself included
  std::vector<bool> entry_;            // a function's first block, or one no entry reaches

  explicit Cfg(const Listing& listing) {
    const auto& code = listing.instructions;
    const auto target_of = [&](const Instruction& i) -> std::optional<std::size_t> {
      if (i.target.empty()) return std::nullopt;
      const auto t = listing.labels.find(i.target);
      if (t == listing.labels.end()) return std::nullopt;
      return static_cast<std::size_t>(t->second);
    };
    std::vector<bool> leader(code.size() + 1, false);
    for (std::size_t n = 0; n < code.size(); ++n) {
      if (n == 0 || code[n - 1].function != code[n].function) leader[n] = true;
      if (code[n].opcode == "BRA" || code[n].opcode == "EXIT" || code[n].opcode == "RET") leader[n + 1] = true;
      if (const auto t = target_of(code[n])) leader[*t] = true;
    }
    std::vector<std::size_t> block_of(code.size());
    for (std::size_t n = 0; n < code.size(); ++n) {
      if (leader[n]) {
        if (!first.empty()) last.push_back(n - 1);
        first.push_back(n);
      }
      block_of[n] = first.size() - 1;
    }
    if (!first.empty()) last.push_back(code.size() - 1);
    const std::size_t blocks = first.size();
    succ.resize(blocks);
    pred.resize(blocks);
    const auto link = [&](std::size_t from, std::size_t to) {
      if (code[first[to]].function != code[first[from]].function) return;
      succ[from].push_back(to);
      pred[to].push_back(from);
    };
    for (std::size_t b = 0; b < blocks; ++b) {
      const Instruction& end = code[last[b]];
      if (const auto t = target_of(end)) link(b, block_of[*t]);
      if (falls_through(end) && b + 1 < blocks) link(b, b + 1);
    }
    // Entries: each function's first block. Blocks no entry reaches (the
    // padding after the last EXIT) are entries of their own.
    std::vector<bool> reached(blocks, false);
    std::vector<std::size_t> work;
    for (std::size_t b = 0; b < blocks; ++b) {
      if (b == 0 || code[first[b - 1]].function != code[first[b]].function) work.push_back(b);
    }
    mark_along(std::move(work), succ, reached);
    entry_.assign(blocks, false);
    dom.assign(blocks, std::vector<bool>(blocks, true));
    for (std::size_t b = 0; b < blocks; ++b) {
      const bool function_start = b == 0 || code[first[b - 1]].function != code[first[b]].function;
      if (function_start || !reached[b]) {
        entry_[b] = true;
        dom[b].assign(blocks, false);
        dom[b][b] = true;
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t b = 0; b < blocks; ++b) {
        if (entry_[b]) continue;
        std::vector<bool> next(blocks, true);
        for (std::size_t p : pred[b]) {
          if (!reached[p]) continue;
          for (std::size_t k = 0; k < blocks; ++k) next[k] = next[k] && dom[p][k];
        }
        next[b] = true;
        if (next != dom[b]) {
          dom[b] = std::move(next);
          changed = true;
        }
      }
    }
    depth.resize(blocks);
    for (std::size_t b = 0; b < blocks; ++b) depth[b] = std::count(dom[b].begin(), dom[b].end(), true);
  }

  std::size_t blocks() const { return first.size(); }

  // The closest strict dominator; none for an entry.
  std::optional<std::size_t> idom(std::size_t b) const {
    std::optional<std::size_t> best;
    std::ptrdiff_t best_depth = -1;
    for (std::size_t d = 0; d < blocks(); ++d) {
      if (d == b || !dom[b][d]) continue;
      if (depth[d] > best_depth) {
        best = d;
        best_depth = depth[d];
      }
    }
    return best;
  }

  // Per loop header (a block), the blocks of its natural loop: for each back
  // edge (to a block that dominates its source), what reaches the source
  // without passing the header.
  std::map<std::size_t, std::vector<bool>> natural_loops() const {
    std::map<std::size_t, std::vector<bool>> bodies;
    for (std::size_t b = 0; b < blocks(); ++b) {
      for (std::size_t h : succ[b]) {
        if (!dom[b][h]) continue;
        std::vector<bool>& body = bodies.try_emplace(h, std::vector<bool>(blocks(), false)).first->second;
        body[h] = true;
        mark_along({b}, pred, body);
      }
    }
    return bodies;
  }
};

}  // namespace

SassAudit audit_sass(std::string_view sass) {
  const Listing listing = parse(sass);
  const auto& code = listing.instructions;
  const Cfg cfg(listing);
  SassAudit audit;
  // Regions: an instruction belongs to the closest setmaxnreg that dominates
  // it (so code placed out of line, such as a wait's retry, counts with the
  // role that branches to it), else to its function's entry budget.
  std::map<std::pair<int, std::ptrdiff_t>, SassRegion> regions;  // (function, opener or -1)
  std::vector<std::ptrdiff_t> opener_at_end(cfg.blocks(), -1);
  std::vector<std::size_t> order(cfg.blocks());
  for (std::size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cfg.depth[a] < cfg.depth[b]; });
  for (std::size_t b : order) {
    const std::optional<std::size_t> up = cfg.idom(b);
    std::ptrdiff_t opener = up ? opener_at_end[*up] : -1;
    for (std::size_t n = cfg.first[b]; n <= cfg.last[b]; ++n) {
      const Instruction& i = code[n];
      if (i.opcode == "USETMAXREG") opener = static_cast<std::ptrdiff_t>(n);
      SassRegion& r = regions[{i.function, opener}];
      if (r.instructions == 0) {
        r.function = listing.functions[static_cast<std::size_t>(i.function)];
        r.first_address = opener >= 0 ? code[static_cast<std::size_t>(opener)].address : 0;
        r.register_limit = opener >= 0 ? register_limit(code[static_cast<std::size_t>(opener)].operands) : 0;
      }
      ++r.instructions;
      r.highest_register = std::max(r.highest_register, highest_register(i.operands));
      if (i.opcode == "STL") ++r.spill_stores;
      if (i.opcode == "LDL") ++r.spill_loads;
    }
    opener_at_end[b] = opener;
  }
  for (auto& [at, r] : regions) audit.regions.push_back(std::move(r));
  std::stable_sort(audit.regions.begin(), audit.regions.end(), [](const SassRegion& a, const SassRegion& b) {
    return a.function != b.function ? a.function < b.function : a.first_address < b.first_address;
  });
  const std::map<std::size_t, std::vector<bool>> loops = cfg.natural_loops();
  std::vector<std::size_t> mma_headers;  // the headers of loops that issue an MMA
  for (const auto& [header, body] : loops) {
    for (std::size_t b = 0; b < cfg.blocks(); ++b) {
      if (body[b] && std::any_of(code.begin() + static_cast<std::ptrdiff_t>(cfg.first[b]),
                                 code.begin() + static_cast<std::ptrdiff_t>(cfg.last[b]) + 1, is_mma)) {
        mma_headers.push_back(header);
        break;
      }
    }
  }
  for (const auto& [header, body] : loops) {
    SassLoop loop;
    loop.inner_mma_loops = static_cast<int>(
        std::count_if(mma_headers.begin(), mma_headers.end(), [&](std::size_t h) { return h != header && body[h]; }));
    loop.function = listing.functions[static_cast<std::size_t>(code[cfg.first[header]].function)];
    loop.begin_address = code[cfg.first[header]].address;
    for (std::size_t b = 0; b < cfg.blocks(); ++b) {
      if (!body[b]) continue;
      for (std::size_t n = cfg.first[b]; n <= cfg.last[b]; ++n) {
        loop.end_address = std::max(loop.end_address, code[n].address);
        ++loop.instructions;
        if (is_mma(code[n])) {
          ++loop.mma;
          ++loop.mma_shapes[code[n].mnemonic];
        }
        if (const std::string c = class_of(code[n]); !c.empty()) ++loop.classes[c];
      }
    }
    if (loop.mma == 0) continue;
    loop.instructions_per_mma = static_cast<double>(loop.instructions) / loop.mma;
    audit.loops.push_back(std::move(loop));
  }
  std::stable_sort(audit.loops.begin(), audit.loops.end(),
                   [](const SassLoop& a, const SassLoop& b) { return a.begin_address < b.begin_address; });
  return audit;
}

}  // namespace attune::profile
