// Shadow state of one block's shared memory, byte by byte: who wrote and who
// read each byte since the last barrier, and which bytes wait for a cp.async
// that has not landed. Finds races and reads of in-flight copies.
//
// Block barriers order everything: they start a new epoch, and accesses of
// an earlier epoch never conflict. Within an epoch, without vector clocks
// (a kernel with no mbarrier or named barrier), any two accesses of a byte
// by different threads of which one writes race. With clocks, an earlier
// access is no race when the accessing thread's clock has seen the other
// thread's clock component at that access (FastTrack's epochs): beside the
// cell, the last writer's component and one reader's; several readers not
// ordered among themselves move to a read set on the side, for that byte
// only, so the common path stays one cell (and its clocks) per byte.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace attune::emu {

class SharedShadow {
 public:
  struct Conflict {
    enum class Kind : std::uint8_t { kRace, kPendingAsyncCopy } kind;
    std::int32_t other_thread;  // the writer, the earlier reader, or the copy's issuer
    bool other_wrote;           // kRace: the earlier access was a write
    std::uint64_t offset;       // first conflicting byte
  };

  // Forgets everything; `bytes` of shared memory.
  void reset(std::uint64_t bytes);
  // A block barrier: accesses before it never race with accesses after it.
  void next_epoch() {
    ++epoch_;
    forget_read_sets();
  }
  // Records an access by `thread` and returns the first conflict, if any:
  // ordered by block barriers only.
  std::optional<Conflict> access(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes, bool write);
  // The same with happens-before: `clock` is the thread's vector clock (one
  // component per thread; its own is at least 1). An earlier access whose
  // thread's component the clock has reached happens before this one.
  std::optional<Conflict> access(std::int32_t thread, const std::uint32_t* clock, std::uint64_t offset,
                                 std::uint64_t bytes, bool write);
  // A cp.async by `thread` targets these bytes; they hold stale data until
  // the copy lands.
  void mark_pending(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes);
  void clear_pending(std::uint64_t offset, std::uint64_t bytes);

 private:
  struct Cell {
    std::uint32_t epoch = 0;
    std::int32_t writer = -1;
    std::int32_t reader = -1;   // with clocks, -2 - i: the readers are read_sets_[i]
    bool many_readers = false;  // more than `reader` (with clocks: recorded before clocks started)
    std::int32_t pending = -1;  // thread whose cp.async has not landed here
  };
  // Beside each cell once the block keeps clocks: the writer's own clock
  // component at the write and the reader's at its read (0: recorded
  // before clocks started).
  struct Clocks {
    std::uint32_t write = 0;
    std::uint32_t read = 0;
  };
  struct Read {
    std::int32_t thread;
    std::uint32_t clock;
  };

  // The first read of the cell that `clock` has not seen, by another thread.
  std::optional<std::int32_t> unordered_reader(const Cell& cell, const Clocks& at, std::int32_t thread,
                                               const std::uint32_t* clock) const;
  void record_read(Cell& cell, Clocks& at, std::int32_t thread, const std::uint32_t* clock);
  std::uint32_t new_read_set();
  void forget_read_sets() {
    sets_used_ = 0;
    free_sets_.clear();
  }

  std::vector<Cell> cells_;
  std::uint32_t epoch_ = 1;
  // Kept only in blocks with clocks, so that the path without them is what
  // it was: sized (and zeroed) by the block's first access with clocks.
  std::vector<Clocks> clocks_;
  bool clocks_ready_ = false;
  // Read sets of this epoch (kept with their capacity from epoch to epoch):
  // read_sets_[0, sets_used_) minus free_sets_ are in use.
  std::vector<std::vector<Read>> read_sets_;
  std::uint32_t sets_used_ = 0;
  std::vector<std::uint32_t> free_sets_;
};

}  // namespace attune::emu
