#include "emulator/shared_shadow.h"

#include <algorithm>

namespace attune::emu {

namespace {

// The access `clock` belongs to happens after an access by `thread` when it
// has seen that thread's component then (`at`). An access recorded before
// the block kept clocks (0) precedes that thread's first release, made with
// the component clocks start at: 1.
bool seen(const std::uint32_t* clock, std::int32_t thread, std::uint32_t at) {
  return clock[thread] >= std::max<std::uint32_t>(at, 1);
}

constexpr std::int32_t set_reader(std::uint32_t set) { return -2 - static_cast<std::int32_t>(set); }
constexpr std::uint32_t reader_set(std::int32_t reader) { return static_cast<std::uint32_t>(-2 - reader); }

}  // namespace

void SharedShadow::reset(std::uint64_t bytes) {
  cells_.assign(bytes, Cell{});
  epoch_ = 1;
  clocks_ready_ = false;
  forget_read_sets();
}

std::optional<SharedShadow::Conflict> SharedShadow::access(std::int32_t thread, std::uint64_t offset,
                                                           std::uint64_t bytes, bool write) {
  std::optional<Conflict> first;
  for (std::uint64_t i = offset; i < offset + bytes; ++i) {
    Cell& cell = cells_[i];
    if (cell.epoch != epoch_) cell = Cell{.epoch = epoch_, .pending = cell.pending};
    if (!first && cell.pending >= 0) {
      first = Conflict{Conflict::Kind::kPendingAsyncCopy, cell.pending, true, i};
    }
    if (!first && cell.writer >= 0 && cell.writer != thread) {
      first = Conflict{Conflict::Kind::kRace, cell.writer, true, i};
    }
    if (write) {
      if (!first && cell.reader >= 0 && (cell.reader != thread || cell.many_readers)) {
        first = Conflict{Conflict::Kind::kRace, cell.reader, false, i};
      }
      cell.writer = thread;
    } else if (cell.reader < 0) {
      cell.reader = thread;
    } else if (cell.reader != thread) {
      cell.many_readers = true;
    }
  }
  return first;
}

std::optional<SharedShadow::Conflict> SharedShadow::access(std::int32_t thread, const std::uint32_t* clock,
                                                           std::uint64_t offset, std::uint64_t bytes, bool write) {
  if (!clocks_ready_) {
    clocks_.assign(cells_.size(), Clocks{});
    clocks_ready_ = true;
  }
  std::optional<Conflict> first;
  const std::uint32_t own = clock[thread];
  for (std::uint64_t i = offset; i < offset + bytes; ++i) {
    Cell& cell = cells_[i];
    Clocks& at = clocks_[i];
    if (cell.epoch != epoch_) {
      cell = Cell{.epoch = epoch_, .pending = cell.pending};
      at = Clocks{};
    }
    if (!first && cell.pending >= 0) {
      first = Conflict{Conflict::Kind::kPendingAsyncCopy, cell.pending, true, i};
    }
    if (!first && cell.writer >= 0 && cell.writer != thread && !seen(clock, cell.writer, at.write)) {
      first = Conflict{Conflict::Kind::kRace, cell.writer, true, i};
    }
    if (!write) {
      record_read(cell, at, thread, clock);
      continue;
    }
    if (cell.reader != -1) {
      if (!first) {
        if (const auto reader = unordered_reader(cell, at, thread, clock)) {
          first = Conflict{Conflict::Kind::kRace, *reader, false, i};
        }
      }
      // Every read so far happens before this write (or was reported): a
      // later access ordered after the write is ordered after them too.
      if (cell.reader <= -2) free_sets_.push_back(reader_set(cell.reader));
      cell.reader = -1;
      cell.many_readers = false;
      at.read = 0;
    }
    cell.writer = thread;
    at.write = own;
  }
  return first;
}

std::optional<std::int32_t> SharedShadow::unordered_reader(const Cell& cell, const Clocks& at, std::int32_t thread,
                                                           const std::uint32_t* clock) const {
  if (cell.reader <= -2) {
    for (const Read& r : read_sets_[reader_set(cell.reader)]) {
      if (r.thread != thread && !seen(clock, r.thread, r.clock)) return r.thread;
    }
    return std::nullopt;
  }
  // Readers recorded before clocks started are not known one by one.
  if (cell.many_readers) return cell.reader;
  if (cell.reader != thread && !seen(clock, cell.reader, at.read)) return cell.reader;
  return std::nullopt;
}

// A read by `thread`: a read it has seen is covered by this one (a write
// ordered after this read is ordered after that one), so only reads not
// ordered among themselves are kept.
void SharedShadow::record_read(Cell& cell, Clocks& at, std::int32_t thread, const std::uint32_t* clock) {
  const std::uint32_t own = clock[thread];
  if (cell.reader <= -2) {
    const std::uint32_t set = reader_set(cell.reader);
    std::vector<Read>& reads = read_sets_[set];
    std::erase_if(reads, [&](const Read& r) { return r.thread == thread || seen(clock, r.thread, r.clock); });
    if (!reads.empty()) {
      reads.push_back(Read{thread, own});
      return;
    }
    free_sets_.push_back(set);
    cell.reader = thread;
    at.read = own;
    return;
  }
  if (cell.many_readers) return;  // read by several before clocks started: any later write races
  if (cell.reader < 0 || cell.reader == thread || seen(clock, cell.reader, at.read)) {
    cell.reader = thread;
    at.read = own;
    return;
  }
  const std::uint32_t set = new_read_set();
  read_sets_[set].push_back(Read{cell.reader, at.read});
  read_sets_[set].push_back(Read{thread, own});
  cell.reader = set_reader(set);
}

std::uint32_t SharedShadow::new_read_set() {
  std::uint32_t set = 0;
  if (!free_sets_.empty()) {
    set = free_sets_.back();
    free_sets_.pop_back();
  } else {
    set = sets_used_++;
    if (set == read_sets_.size()) read_sets_.emplace_back();
  }
  read_sets_[set].clear();
  return set;
}

void SharedShadow::mark_pending(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes) {
  for (std::uint64_t i = offset; i < offset + bytes; ++i) cells_[i].pending = thread;
}

void SharedShadow::clear_pending(std::uint64_t offset, std::uint64_t bytes) {
  for (std::uint64_t i = offset; i < offset + bytes; ++i) cells_[i].pending = -1;
}

}  // namespace attune::emu
