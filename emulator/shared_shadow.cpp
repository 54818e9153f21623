#include "emulator/shared_shadow.h"

namespace attune::emu {

void SharedShadow::reset(std::uint64_t bytes) {
  cells_.assign(bytes, Cell{});
  epoch_ = 1;
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

void SharedShadow::mark_pending(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes) {
  for (std::uint64_t i = offset; i < offset + bytes; ++i) cells_[i].pending = thread;
}

void SharedShadow::clear_pending(std::uint64_t offset, std::uint64_t bytes) {
  for (std::uint64_t i = offset; i < offset + bytes; ++i) cells_[i].pending = -1;
}

}  // namespace attune::emu
