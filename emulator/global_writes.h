// Which block of the running launch wrote each byte of one registered global
// buffer, and which added to each word last (GlobalReductions). Blocks of a launch run in any order, and at once, on a
// GPU: two of them writing the same bytes with ordinary or TMA stores leave either value (atomics are not recorded). A
// record packs the launch's tag with the block, so a new launch needs no clearing; records are kept a page of the
// buffer at a time, allocated on the page's first write.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace attune::emu {

class GlobalWrites {
 public:
  // A record: the launch's tag in the high bits, the block's linear index
  // plus one in the low bits; 0: not written.
  static constexpr unsigned kBlockBits = 22;
  // Grids with more blocks are not checked.
  static constexpr std::int64_t kMaxBlocks = (std::int64_t{1} << kBlockBits) - 1;
  // Tags run 1..kLaunchTags; then every record is cleared and they start over.
  static constexpr std::uint32_t kLaunchTags = (1U << (32 - kBlockBits)) - 1;

  static std::uint32_t record(std::uint32_t launch_tag, std::int64_t block) {
    return (launch_tag << kBlockBits) | static_cast<std::uint32_t>(block + 1);
  }
  static std::uint32_t launch_tag(std::uint32_t record) { return record >> kBlockBits; }
  static std::int64_t block(std::uint32_t record) {
    return static_cast<std::int64_t>(record & ((1U << kBlockBits) - 1)) - 1;
  }

  struct Conflict {
    std::uint64_t offset;  // the first byte another block of the launch wrote
    std::int64_t block;    // that block's linear index
  };

  explicit GlobalWrites(std::uint64_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}
  // Records `bytes` at `offset` as written by `writer` (a record) and
  // returns the first byte some other block of the same launch wrote.
  std::optional<Conflict> write(std::uint64_t offset, std::uint64_t bytes, std::uint32_t writer);
  // The record of byte `offset` (0: not written).
  std::uint32_t writer(std::uint64_t offset) const;
  // Forgets every record (the launch tags start over).
  void clear();

 private:
  static constexpr unsigned kPageBits = 12;  // 4 KiB of the buffer, 16 KiB of records
  static constexpr std::uint64_t kPageBytes = std::uint64_t{1} << kPageBits;

  std::uint64_t buffer_bytes_;
  std::vector<std::unique_ptr<std::uint32_t[]>> pages_;  // null until written
};

// The last float reduction (an atomic add, ordered or not) to each 4-byte
// word of one registered buffer: which block and thread made it and when,
// so that a later access can ask whether it happens after it. Reductions
// commute with each other as memory operations; their float sums do not,
// and they race with plain reads and stores.
class GlobalReductions {
 public:
  struct Record {
    std::uint32_t block_record = 0;  // GlobalWrites::record(launch tag, block); 0: none
    std::uint32_t unit = 0;          // the resident unit that ran the block
    std::uint32_t epoch = 0;         // the block's epoch (its semaphore releases so far, plus one)
    std::int32_t thread = -1;        // in its unit
    std::uint32_t thread_clock = 0;  // the thread's own clock component then (0: not tracked)
  };

  explicit GlobalReductions(std::uint64_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}
  // The record of the word holding byte `offset`; null when there is none.
  const Record* find(std::uint64_t offset) const;
  // Records `r` for the word holding byte `offset` and returns the previous record.
  Record exchange(std::uint64_t offset, const Record& r);
  // The launch tag of the latest record (0: none): a buffer never reduced
  // in a launch costs its reads and stores nothing.
  std::uint32_t latest_tag() const { return latest_tag_; }
  void clear();

 private:
  static constexpr unsigned kPageBits = 12;  // 1024 words: 4 KiB of the buffer
  static constexpr std::uint64_t kPageWords = std::uint64_t{1} << (kPageBits - 2);

  std::uint64_t buffer_bytes_;
  std::uint32_t latest_tag_ = 0;
  std::vector<std::unique_ptr<Record[]>> pages_;  // null until reduced
};

}  // namespace attune::emu
