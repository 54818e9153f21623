// Shadow state of one block's shared memory, byte by byte: who wrote and who
// read each byte since the last barrier, and which bytes wait for a cp.async
// that has not landed. Finds races and reads of in-flight copies.
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
  void next_epoch() { ++epoch_; }
  // Records an access by `thread` and returns the first conflict, if any.
  std::optional<Conflict> access(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes, bool write);
  // A cp.async by `thread` targets these bytes; they hold stale data until
  // the copy lands.
  void mark_pending(std::int32_t thread, std::uint64_t offset, std::uint64_t bytes);
  void clear_pending(std::uint64_t offset, std::uint64_t bytes);

 private:
  struct Cell {
    std::uint32_t epoch = 0;
    std::int32_t writer = -1;
    std::int32_t reader = -1;
    bool many_readers = false;
    std::int32_t pending = -1;  // thread whose cp.async has not landed here
  };
  std::vector<Cell> cells_;
  std::uint32_t epoch_ = 1;
};

}  // namespace attune::emu
