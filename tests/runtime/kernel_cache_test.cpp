#include "runtime/jit/kernel_cache.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/support/env_guard.h"
#include "tests/support/file_bytes.h"
#include "tests/support/temp_dir.h"
#include "tests/support/xdg_location.h"

namespace attune {
namespace {

namespace fs = std::filesystem;

// Offsets of the documented entry format (see kernel_cache.h).
constexpr std::size_t kVersionOffset = 8;
constexpr std::size_t kPayloadSizeOffset = 12;
constexpr std::size_t kShaOffset = 20;
constexpr std::size_t kKeyLengthOffset = 52;
constexpr std::size_t kKeyOffset = 56;

using attune::testing::EnvGuard;
using attune::testing::read_bytes;
using attune::testing::TempDir;

CacheKey make_key(const std::string& variant) {
  return CacheKey{
      .template_hash = std::string(64, 'a'),
      .variant_id = variant,
      .dtype = "bf16",
      .arch = "sm_90a",
      .nvrtc_version = "13.0",
      .options = "-std=c++20 --use_fast_math",
  };
}

// Deterministic bytes, zeros included, different for each seed.
std::vector<char> make_binary(std::size_t size, std::uint32_t seed) {
  std::vector<char> out(size);
  std::uint32_t state = seed * 2654435761u + 1;
  for (char& c : out) {
    state = state * 1664525u + 1013904223u;
    c = static_cast<char>(state >> 24);
  }
  return out;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::vector<std::string> file_names(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(directory)) names.push_back(item.path().filename().string());
  return names;
}

// The CacheError message of constructing a cache on `directory`, or a note
// saying that nothing (or something else) was thrown.
std::string construction_error(const fs::path& directory) {
  try {
    KernelCache cache({.directory = directory});
  } catch (const CacheError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a CacheError: ") + e.what() + ">";
  }
  return "<nothing thrown>";
}

TEST(KernelCacheTest, MissThenStoreThenHitFromMemoryAndFromDisk) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  const CacheKey key = make_key("flash_fwd/d128.bm64.bn32.wm4.wn1.st2");
  const std::vector<char> binary = make_binary(5000, 1);
  {
    KernelCache cache({.directory = dir});
    EXPECT_EQ(cache.load(key), std::nullopt);
    EXPECT_EQ(cache.stats().misses, 1u);
    cache.store(key, binary);
    EXPECT_EQ(cache.stats().stores, 1u);
    EXPECT_EQ(cache.disk_entries(), 1u);
    EXPECT_EQ(file_names(dir), std::vector<std::string>{key.digest()});
    EXPECT_EQ(mode_of(dir / key.digest()), 0600u);
    EXPECT_EQ(cache.disk_bytes(), fs::file_size(dir / key.digest()));
    EXPECT_GT(cache.disk_bytes(), binary.size());

    EXPECT_EQ(cache.load(key), binary);
    EXPECT_EQ(cache.stats().memory_hits, 1u);
    EXPECT_EQ(cache.stats().disk_hits, 0u);
    EXPECT_EQ(cache.load(make_key("flash_fwd/other")), std::nullopt);
    EXPECT_EQ(cache.stats().misses, 2u);
    EXPECT_EQ(cache.last_problem(), "");
  }
  {
    KernelCache cache({.directory = dir});
    EXPECT_EQ(cache.load(key), binary);
    EXPECT_EQ(cache.stats().disk_hits, 1u);
    EXPECT_EQ(cache.stats().memory_hits, 0u);
    EXPECT_EQ(cache.load(key), binary);  // now from memory
    EXPECT_EQ(cache.stats().memory_hits, 1u);
  }
  {
    KernelCache cache({.directory = dir, .memory = false});
    EXPECT_EQ(cache.load(key), binary);
    EXPECT_EQ(cache.load(key), binary);
    EXPECT_EQ(cache.stats().disk_hits, 2u);
    EXPECT_EQ(cache.stats().memory_hits, 0u);
  }
}

TEST(KernelCacheTest, EmptyBinaryRoundTrips) {
  TempDir temp;
  KernelCache cache({.directory = temp.path() / "cache", .memory = false});
  const CacheKey key = make_key("empty");
  cache.store(key, std::vector<char>{});
  EXPECT_EQ(cache.load(key), std::vector<char>{});
}

TEST(KernelCacheTest, EveryKeyFieldChangesTheDigest) {
  const CacheKey base = make_key("flash_fwd/d128.bm64.bn32.wm4.wn1.st2");
  const std::string digest = base.digest();
  ASSERT_EQ(digest.size(), 64u);
  EXPECT_EQ(digest.find_first_not_of("0123456789abcdef"), std::string::npos) << digest;
  EXPECT_EQ(base.digest(), make_key("flash_fwd/d128.bm64.bn32.wm4.wn1.st2").digest());

  std::set<std::string> digests{digest};
  for (std::string CacheKey::*field : {&CacheKey::template_hash, &CacheKey::variant_id, &CacheKey::dtype,
                                       &CacheKey::arch, &CacheKey::nvrtc_version, &CacheKey::options}) {
    CacheKey changed = base;
    changed.*field += "x";
    EXPECT_NE(changed.canonical(), base.canonical());
    EXPECT_TRUE(digests.insert(changed.digest()).second) << changed.canonical();
  }
  EXPECT_EQ(digests.size(), 7u);

  // Moving characters from one field to the next must change the key
  // (digest_with: the digest of `base` with a field and the next one set).
  const auto digest_with = [&](std::string CacheKey::*field, const std::string& value, std::string CacheKey::*next,
                               const std::string& next_value) {
    CacheKey changed = base;
    changed.*field = value;
    changed.*next = next_value;
    return changed.digest();
  };
  EXPECT_NE(digest_with(&CacheKey::variant_id, "ab", &CacheKey::dtype, "c"),
            digest_with(&CacheKey::variant_id, "a", &CacheKey::dtype, "bc"));
  // Without length prefixes these two would read "dtype=bf16\narch=sm_90a\narch=\n".
  EXPECT_NE(digest_with(&CacheKey::dtype, "bf16\narch=sm_90a", &CacheKey::arch, ""),
            digest_with(&CacheKey::dtype, "bf16", &CacheKey::arch, "sm_90a\narch="));
}

struct Corruption {
  std::string name;
  std::function<void(std::string&)> edit;
  std::string reason;  // expected in last_problem()
};

TEST(KernelCacheTest, CorruptEntriesAreDiscardedAndRecovered) {
  const auto flip = [](std::size_t offset) { return [offset](std::string& bytes) { bytes.at(offset) ^= 0x5a; }; };
  const std::vector<Corruption> corruptions = {
      {"truncate payload", [](std::string& s) { s.resize(s.size() - 1); }, "truncated or extended"},
      {"truncate header", [](std::string& s) { s.resize(10); }, "truncated"},
      {"truncate to empty", [](std::string& s) { s.clear(); }, "truncated"},
      {"append a byte", [](std::string& s) { s += 'x'; }, "truncated or extended"},
      {"flip payload byte", [](std::string& s) { s.back() ^= 0x01; }, "SHA-256 mismatch"},
      {"flip first payload byte", [](std::string& s) { s[s.size() - 3000] ^= 0x01; }, "SHA-256 mismatch"},
      {"flip magic byte", flip(0), "wrong magic"},
      {"flip payload size byte", flip(kPayloadSizeOffset), "truncated or extended"},
      {"flip high payload size byte", flip(kPayloadSizeOffset + 7), "truncated or extended"},
      {"flip SHA byte", flip(kShaOffset + 5), "SHA-256 mismatch"},
      {"flip key length byte", flip(kKeyLengthOffset), "truncated or extended"},
      {"flip key byte", flip(kKeyOffset + 40), "different key"},
      {"version 2", [](std::string& s) { s.at(kVersionOffset) = 2; }, "format version 2: expected 1"},
      {"version 0", [](std::string& s) { s.at(kVersionOffset) = 0; }, "format version 0: expected 1"},
  };
  const CacheKey key = make_key("flash_fwd/d64.bm64.bn64.wm4.wn1.st2");
  const std::vector<char> binary = make_binary(3000, 7);
  for (const Corruption& corruption : corruptions) {
    SCOPED_TRACE(corruption.name);
    TempDir temp;
    const fs::path dir = temp.path() / "cache";
    const fs::path entry = dir / key.digest();
    KernelCache cache({.directory = dir, .memory = false});
    cache.store(key, binary);
    ASSERT_EQ(cache.load(key), binary);

    std::string bytes = read_bytes(entry);
    corruption.edit(bytes);
    write_bytes(entry, bytes);
    EXPECT_EQ(cache.load(key), std::nullopt);
    EXPECT_FALSE(fs::exists(entry));
    EXPECT_EQ(cache.stats().discarded, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_EQ(cache.stats().refused, 0u);
    EXPECT_NE(cache.last_problem().find(entry.string()), std::string::npos) << cache.last_problem();
    EXPECT_NE(cache.last_problem().find(corruption.reason), std::string::npos) << cache.last_problem();

    cache.store(key, binary);
    EXPECT_EQ(cache.load(key), binary);
  }
}

TEST(KernelCacheTest, EntryWithAnotherKeyIsDiscarded) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  KernelCache cache({.directory = dir, .memory = false});
  const CacheKey key = make_key("flash_fwd/a");
  const CacheKey other = make_key("flash_fwd/b");
  const std::vector<char> binary = make_binary(2000, 3);
  // Same payload: only the key check can tell the entries apart.
  cache.store(other, binary);
  fs::rename(dir / other.digest(), dir / key.digest());

  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_FALSE(fs::exists(dir / key.digest()));
  EXPECT_EQ(cache.stats().discarded, 1u);
  EXPECT_NE(cache.last_problem().find("different key"), std::string::npos) << cache.last_problem();

  cache.store(key, binary);
  EXPECT_EQ(cache.load(key), binary);
}

TEST(KernelCacheTest, CreatesDirectoryAndParentsPrivate) {
  TempDir temp;
  const fs::path dir = temp.path() / "a" / "b" / "cache";
  const mode_t old_umask = ::umask(022);  // the usual umask would leave 0755
  KernelCache cache({.directory = dir});
  // A umask that takes the owner's write bit must not leave it unusable.
  ::umask(0277);
  const fs::path strict = temp.path() / "c" / "cache";
  KernelCache strict_cache({.directory = strict});
  ::umask(old_umask);
  EXPECT_EQ(mode_of(strict), 0700u);
  EXPECT_EQ(mode_of(temp.path() / "c"), 0700u);
  EXPECT_EQ(cache.directory(), dir);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(temp.path() / "a"), 0700u);
  EXPECT_EQ(mode_of(temp.path() / "a" / "b"), 0700u);

  // A directory that exists and is safe but not 0700 is used as it is.
  const fs::path shared = temp.path() / "readable";
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms(0755));
  EXPECT_NO_THROW(KernelCache({.directory = shared}));
  EXPECT_EQ(mode_of(shared), 0755u);
}

TEST(KernelCacheTest, RefusesWritableByOthersOrNotADirectory) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  fs::create_directory(dir);

  fs::permissions(dir, fs::perms(0777));
  std::string message = construction_error(dir);
  EXPECT_NE(message.find("'" + dir.string() + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("mode 0777"), std::string::npos) << message;
  EXPECT_NE(message.find("expected"), std::string::npos) << message;

  fs::permissions(dir, fs::perms(0720));
  message = construction_error(dir);
  EXPECT_NE(message.find("mode 0720 (writable by group)"), std::string::npos) << message;

  fs::permissions(dir, fs::perms(0702));
  message = construction_error(dir);
  EXPECT_NE(message.find("mode 0702 (writable by others)"), std::string::npos) << message;

  const fs::path file = temp.path() / "file";
  write_bytes(file, "not a directory");
  message = construction_error(file);
  EXPECT_NE(message.find("'" + file.string() + "' is a regular file: expected a directory"), std::string::npos)
      << message;

  message = construction_error(file / "cache");  // a parent that cannot be created
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
}

TEST(KernelCacheTest, RefusesEntryWritableByOthersOrASymlink) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  const CacheKey key = make_key("flash_fwd/unsafe");
  const fs::path entry = dir / key.digest();
  const std::vector<char> binary = make_binary(1000, 4);
  KernelCache({.directory = dir}).store(key, binary);

  for (const unsigned mode : {0666u, 0620u, 0602u}) {
    fs::permissions(entry, fs::perms(mode));
    KernelCache cache({.directory = dir});
    EXPECT_EQ(cache.load(key), std::nullopt);
    EXPECT_EQ(cache.stats().refused, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_EQ(cache.stats().discarded, 0u);
    EXPECT_TRUE(fs::exists(entry));  // not ours to judge: left alone
    const std::string problem = cache.last_problem();
    EXPECT_NE(problem.find(entry.string()), std::string::npos) << problem;
    std::ostringstream octal;
    octal << "mode 0" << std::oct << mode;
    EXPECT_NE(problem.find(octal.str()), std::string::npos) << problem;
  }

  // A store replaces the unsafe entry with a safe one.
  KernelCache cache({.directory = dir, .memory = false});
  cache.store(key, binary);
  EXPECT_EQ(mode_of(entry), 0600u);
  EXPECT_EQ(cache.load(key), binary);

  // A symbolic link could point anywhere: refused even to a valid entry.
  const fs::path elsewhere = temp.path() / "elsewhere";
  fs::rename(entry, elsewhere);
  fs::create_symlink(elsewhere, entry);
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_EQ(cache.stats().refused, 1u);
  EXPECT_NE(cache.last_problem().find("symbolic link"), std::string::npos) << cache.last_problem();
}

TEST(KernelCacheTest, RefusesEntryAndDirectoryOwnedByAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner to uid 65534 needs root";
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  const CacheKey key = make_key("flash_fwd/foreign");
  const fs::path entry = dir / key.digest();
  KernelCache({.directory = dir}).store(key, make_binary(1000, 5));

  ASSERT_EQ(::chown(entry.c_str(), 65534, 65534), 0);
  KernelCache cache({.directory = dir});
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_EQ(cache.stats().refused, 1u);
  EXPECT_TRUE(fs::exists(entry));
  EXPECT_NE(cache.last_problem().find(entry.string()), std::string::npos) << cache.last_problem();
  EXPECT_NE(cache.last_problem().find("owned by uid 65534"), std::string::npos) << cache.last_problem();

  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  const std::string message = construction_error(dir);
  EXPECT_NE(message.find("'" + dir.string() + "' is owned by uid 65534"), std::string::npos) << message;
}

TEST(KernelCacheTest, EvictsLeastRecentlyUsed) {
  const std::vector<char> binary = make_binary(4000, 6);
  std::uint64_t entry_size = 0;
  {
    TempDir probe;
    KernelCache cache({.directory = probe.path() / "cache"});
    cache.store(make_key("A"), binary);
    entry_size = cache.disk_bytes();
  }
  ASSERT_GT(entry_size, binary.size());

  // With and without the memory layer: a memory hit must count as a use too.
  for (const bool memory : {true, false}) {
    SCOPED_TRACE(memory ? "memory" : "disk only");
    TempDir temp;
    const fs::path dir = temp.path() / "cache";
    const std::uint64_t max_bytes = 3 * entry_size + entry_size / 2;
    KernelCache cache({.directory = dir, .max_bytes = max_bytes, .memory = memory});
    for (const char* name : {"A", "B", "C"}) cache.store(make_key(name), binary);
    EXPECT_EQ(cache.disk_entries(), 3u);
    EXPECT_EQ(cache.stats().evictions, 0u);
    EXPECT_EQ(cache.load(make_key("A")), binary);

    cache.store(make_key("D"), binary);
    EXPECT_EQ(cache.stats().evictions, 1u);
    EXPECT_EQ(cache.disk_entries(), 3u);
    EXPECT_LE(cache.disk_bytes(), max_bytes);
    EXPECT_FALSE(fs::exists(dir / make_key("B").digest()));
    for (const char* name : {"A", "C", "D"}) EXPECT_TRUE(fs::exists(dir / make_key(name).digest())) << name;
    EXPECT_EQ(cache.load(make_key("B")), std::nullopt);
    EXPECT_EQ(cache.load(make_key("C")), binary);

    cache.store(make_key("E"), binary);  // A is now the oldest
    EXPECT_FALSE(fs::exists(dir / make_key("A").digest()));
    EXPECT_EQ(cache.stats().evictions, 2u);
  }
}

// Stores in quick succession fall within one tick of the kernel's file clock;
// eviction must still follow their order.
TEST(KernelCacheTest, EvictsInStoreOrderWithinOneClockTick) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  const std::vector<char> binary = make_binary(100, 12);
  const auto name = [](int i) { return "E" + std::to_string(i); };
  std::uint64_t entry_size = 0;
  {
    KernelCache probe({.directory = temp.path() / "probe"});
    probe.store(make_key(name(0)), binary);
    entry_size = probe.disk_bytes();
  }
  constexpr int kKept = 10;
  KernelCache cache({.directory = dir, .max_bytes = kKept * entry_size + entry_size / 2, .memory = false});
  for (int i = 0; i < 3 * kKept; ++i) {
    cache.store(make_key(name(i)), binary);
    if (i < kKept) continue;
    EXPECT_FALSE(fs::exists(dir / make_key(name(i - kKept)).digest())) << "after storing " << name(i);
    EXPECT_TRUE(fs::exists(dir / make_key(name(i - kKept + 1)).digest())) << "after storing " << name(i);
  }
  EXPECT_EQ(cache.stats().evictions, std::uint64_t{2 * kKept});
}

TEST(KernelCacheTest, MemoryLayerKeepsTheMostRecentlyUsedWithinMaxBytes) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  const std::vector<char> binary = make_binary(1000, 11);
  KernelCache cache({.directory = dir, .max_bytes = 3500});
  for (const char* name : {"A", "B", "C"}) cache.store(make_key(name), binary);
  EXPECT_EQ(cache.load(make_key("A")), binary);
  cache.store(make_key("D"), binary);
  // Without the disk, only memory answers: B was used least recently.
  for (const char* name : {"A", "B", "C", "D"}) fs::remove(dir / make_key(name).digest());
  for (const char* name : {"A", "C", "D"}) EXPECT_EQ(cache.load(make_key(name)), binary) << name;
  EXPECT_EQ(cache.load(make_key("B")), std::nullopt);
  EXPECT_EQ(cache.stats().memory_hits, 4u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(KernelCacheTest, NeverEvictsTheEntryJustStored) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  KernelCache cache({.directory = dir, .max_bytes = 1});
  const std::vector<char> binary = make_binary(1000, 8);
  cache.store(make_key("A"), binary);
  EXPECT_EQ(cache.disk_entries(), 1u);
  cache.store(make_key("B"), binary);
  EXPECT_EQ(file_names(dir), std::vector<std::string>{make_key("B").digest()});
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.load(make_key("B")), binary);
}

TEST(KernelCacheTest, TwoProcessesStoreAndLoadTheSameKey) {
  TempDir temp;
  const CacheKey key = make_key("flash_fwd/shared");
  constexpr int kStoresPerChild = 5;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // A new directory each round: the processes also race to create it.
    const fs::path dir = temp.path() / ("round" + std::to_string(round)) / "cache";
    const std::vector<char> binary = make_binary((std::size_t{1} << 20) + round, static_cast<std::uint32_t>(round));
    int start[2];
    ASSERT_EQ(::pipe(start), 0);
    pid_t children[2];
    for (pid_t& child : children) {
      child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        ::close(start[1]);
        char go = 0;
        if (::read(start[0], &go, 1) != 1) ::_exit(3);
        try {
          // No memory layer: the load must read what is on disk.
          KernelCache cache({.directory = dir, .memory = false});
          for (int i = 0; i < kStoresPerChild; ++i) {
            cache.store(key, binary);
            const auto loaded = cache.load(key);
            if (!loaded || *loaded != binary) ::_exit(1);
          }
          ::_exit(0);
        } catch (...) {
          ::_exit(2);
        }
      }
    }
    ::close(start[0]);
    ASSERT_EQ(::write(start[1], "gg", 2), 2);  // both start together
    ::close(start[1]);
    for (const pid_t child : children) {
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "child exited with " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
          << " (1: wrong or missing bytes, 2: exception)";
    }
    EXPECT_EQ(file_names(dir), std::vector<std::string>{key.digest()});
    EXPECT_EQ(KernelCache({.directory = dir}).load(key), binary);
  }
}

TEST(KernelCacheTest, ThreadsShareOneCache) {
  TempDir temp;
  KernelCache cache({.directory = temp.path() / "cache"});
  constexpr int kThreads = 4;
  constexpr int kRounds = 30;
  constexpr int kKeys = 5;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int k = (i + t) % kKeys;
        const CacheKey key = make_key("k" + std::to_string(k));
        const std::vector<char> binary = make_binary(2000 + k, static_cast<std::uint32_t>(k));
        if (i % 3 == 0) cache.store(key, binary);
        const auto loaded = cache.load(key);
        if (loaded && *loaded != binary) ++wrong;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.memory_hits + stats.disk_hits + stats.misses, std::uint64_t{kThreads * kRounds});
  EXPECT_EQ(stats.stores, std::uint64_t{kThreads * ((kRounds + 2) / 3)});
  EXPECT_EQ(cache.disk_entries(), std::size_t{kKeys});
}

TEST(KernelCacheTest, StoreFailureThrowsIoErrorNamingThePath) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  KernelCache cache({.directory = dir});
  fs::remove_all(dir);  // files can no longer be created in it
  const CacheKey key = make_key("flash_fwd/lost");
  try {
    cache.store(key, make_binary(100, 9));
    ADD_FAILURE() << "store into a removed directory did not throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / key.digest()).string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.load(make_key("flash_fwd/other")), std::nullopt);
}

TEST(KernelCacheTest, RemovesStaleTemporaryFilesOnly) {
  TempDir temp;
  const fs::path dir = temp.path() / "cache";
  KernelCache cache({.directory = dir});
  const fs::path stale = dir / ("." + std::string(64, '0') + ".tmp.1.0");
  const fs::path fresh = dir / ("." + std::string(64, '1') + ".tmp.1.0");
  const fs::path other = dir / "README";
  write_bytes(stale, "left by a writer that died");
  write_bytes(fresh, "being written");
  write_bytes(other, "not an entry");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));

  cache.store(make_key("A"), make_binary(100, 10));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(cache.disk_entries(), 1u);
  EXPECT_EQ(cache.disk_bytes(), fs::file_size(dir / make_key("A").digest()));
}

TEST(KernelCacheTest, DefaultDirectoryFollowsTheEnvironment) {
  EnvGuard guard({"ATTUNE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"});
  attune::testing::expect_xdg_location(&KernelCache::default_directory, "ATTUNE_CACHE_DIR", "XDG_CACHE_HOME", ".cache",
                                       "attune");

  EnvGuard::set("HOME", std::nullopt);
  if (const passwd* user = ::getpwuid(::geteuid()); user != nullptr && user->pw_dir != nullptr) {
    EXPECT_EQ(KernelCache::default_directory(), fs::path(user->pw_dir) / ".cache" / "attune");
  }

  TempDir temp;
  EnvGuard::set("ATTUNE_CACHE_DIR", (temp.path() / "from_env").string());
  KernelCache cache({});
  EXPECT_EQ(cache.directory(), temp.path() / "from_env");
  EXPECT_TRUE(fs::is_directory(temp.path() / "from_env"));
}

}  // namespace
}  // namespace attune
