// Content-addressed cache of compiled kernel binaries (cubins), in memory and
// on disk, shared safely by the processes of one user.
//
// Each entry is one file named by CacheKey::digest(), written to a temporary
// file and renamed into place, so readers only ever see complete files. Every
// entry is verified when read (magic, format version, sizes, SHA-256 of the
// payload, the full key); a bad one is deleted and reported as a miss so the
// caller recompiles. The directory and the entries must belong to the current
// user and be writable by nobody else: a binary that another user can replace
// would run on the GPU as ours.
//
// Example:
//   attune::KernelCache cache({.directory = attune::KernelCache::default_directory()});
//   if (auto cubin = cache.load(key)) return *cubin;
//   CompileResult result = compile_with_nvrtc(...);
//   if (result.ok) cache.store(key, result.cubin);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace attune {

// Everything that changes a compiled binary. Two keys with equal fields name
// the same binary; any difference names another.
struct CacheKey {
  std::string template_hash;  // SHA-256 of the bundled template source
  std::string variant_id;     // flash_fwd/d128.bm64.bn32.wm4.wn1.st2
  std::string dtype;          // fp16 | bf16
  std::string arch;           // sm_90a
  std::string nvrtc_version;  // 13.0
  std::string options;        // compile options, joined

  // All fields as one unambiguous string: a schema line, then one line per
  // field, `name=<byte length>:<value>`, so no value can run into the next.
  std::string canonical() const;

  // Lowercase hex SHA-256 of canonical() (64 characters): the entry's file name.
  std::string digest() const;
};

// A cache directory that cannot be used safely (wrong owner, writable by
// others, not a directory) or cannot be created.
class CacheError : public Error {
 public:
  using Error::Error;
};

struct CacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t misses = 0;     // every load that returned nothing
  std::uint64_t discarded = 0;  // entries deleted as corrupt, truncated, foreign version or wrong key
  std::uint64_t refused = 0;    // entries not read: other owner, group/other-writable, not a regular file
  std::uint64_t evictions = 0;  // entries this cache deleted to stay within max_bytes
  std::uint64_t stores = 0;
};

// Entry file format, version 1 (integers little-endian):
//   offset  0  8 bytes  magic "ATTUNEKC"
//   offset  8  u32      format version (1)
//   offset 12  u64      payload size in bytes
//   offset 20  32 bytes SHA-256 of the payload
//   offset 52  u32      key length, then CacheKey::canonical() bytes
//   then                payload (the cubin)
// The file size must be exactly 56 + key length + payload size.
//
// Several processes may share a directory without a lock: stores write a
// private temporary file (".<digest>.tmp.*") and rename it over the entry,
// concurrent stores of one key leave one complete entry, and an entry that
// disappears between listing and opening is a miss. Eviction is best effort:
// two processes evicting at once may delete a little more than needed, which
// costs a recompile, never a wrong binary.
//
// Recency for eviction is the entry's mtime, set on store and on every hit
// (memory hits included) with nanosecond resolution.
//
// Thread-safe: one mutex guards the memory layer, the statistics and
// last_problem(); file operations run outside it.
class KernelCache {
 public:
  struct Options {
    std::filesystem::path directory;       // empty: default_directory()
    std::uint64_t max_bytes = 1ull << 30;  // entries on disk (whole files), and the memory layer
    bool memory = true;                    // keep binaries in memory too, least recently used dropped beyond max_bytes
  };

  // $ATTUNE_CACHE_DIR, else $XDG_CACHE_HOME/attune (when absolute), else
  // $HOME/.cache/attune (HOME from the password database when unset).
  // Throws CacheError when none of them is available.
  static std::filesystem::path default_directory();

  // Creates the directory and its missing parents with mode 0700. Throws
  // CacheError naming the path, what was found and what is expected when it
  // exists but is not a directory, is owned by another user or is writable
  // by group or others, when it cannot be created or opened, or when this
  // user cannot write it (a read-only mount).
  explicit KernelCache(Options options);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The binary stored under `key`: from memory, else from disk after
  // verification. A bad entry is deleted (discarded); an entry that is not
  // safe to use is left alone (refused); both are misses and explain
  // themselves in last_problem().
  std::optional<std::vector<char>> load(const CacheKey& key);

  // Stores `binary` under `key` atomically (temporary file with mode 0600,
  // fsync, rename, fsync of the directory), then deletes the least recently
  // used entries until the entries total at most max_bytes; the entry just
  // stored is never deleted. Throws IoError naming the path on failure.
  void store(const CacheKey& key, std::span<const char> binary);

  CacheStats stats() const;
  std::uint64_t disk_bytes() const;  // total size of the entry files
  std::size_t disk_entries() const;
  std::string last_problem() const;  // last refusal or discard, empty if none
  const std::filesystem::path& directory() const { return directory_; }

 private:
  struct MemoryEntry {
    std::vector<char> binary;
    std::uint64_t last_use = 0;
  };

  void remember(const std::string& digest, std::vector<char> binary);  // caller holds mutex_
  void evict_from_disk(const std::string& keep);

  std::filesystem::path directory_;
  Options options_;
  int dir_fd_ = -1;  // every file operation is relative to it, so the checked directory is the one used

  mutable std::mutex mutex_;
  std::unordered_map<std::string, MemoryEntry> memory_;
  std::uint64_t memory_bytes_ = 0;
  std::uint64_t use_clock_ = 0;
  CacheStats stats_;
  std::string last_problem_;
};

}  // namespace attune
