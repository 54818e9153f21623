// Which block of the running launch wrote each byte of one registered global
// buffer. Blocks of a launch run in any order, and at once, on a GPU: two of
// them writing the same bytes with ordinary or TMA stores leave either value
// (atomics are not recorded). A record packs the launch's tag with the
// block, so a new launch needs no clearing; records are kept a page of the
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
  // Forgets every record (the launch tags start over).
  void clear();

 private:
  static constexpr unsigned kPageBits = 12;  // 4 KiB of the buffer, 16 KiB of records
  static constexpr std::uint64_t kPageBytes = std::uint64_t{1} << kPageBits;

  std::uint64_t buffer_bytes_;
  std::vector<std::unique_ptr<std::uint32_t[]>> pages_;  // null until written
};

}  // namespace attune::emu
