#include "runtime/jit/kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace attune {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "ATTUNEKC";
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kShaSize = 32;
// magic, version, payload size, payload SHA-256, key length.
constexpr std::size_t kHeaderSize = kMagic.size() + 4 + 8 + kShaSize + 4;
constexpr std::size_t kDigestLength = 64;
constexpr std::string_view kTempInfix = ".tmp.";
// A temporary file this old belongs to a writer that died; live writers
// finish in well under a second.
constexpr time_t kStaleTempSeconds = 3600;
// One write()/read() call moves at most this much (Linux caps it near 2 GiB).
constexpr std::size_t kMaxIoCall = std::size_t{1} << 30;
constexpr mode_t kGroupOtherWrite = S_IWGRP | S_IWOTH;

std::string errno_text(int error) { return std::strerror(error); }

std::string octal_mode(mode_t mode) {
  std::array<char, 16> text{};
  std::snprintf(text.data(), text.size(), "%04o", static_cast<unsigned>(mode & 07777));
  return text.data();
}

std::string writable_by(mode_t mode) {
  if ((mode & kGroupOtherWrite) == kGroupOtherWrite) return "group and others";
  return (mode & S_IWGRP) != 0 ? "group" : "others";
}

std::string file_type(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a device";
}

// Closes the descriptor however the scope ends.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  int close() {
    const int result = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

using Sha256 = std::array<unsigned char, kShaSize>;

Sha256 sha256(const void* data, std::size_t size) {
  Sha256 out{};
  unsigned int length = 0;
  if (EVP_Digest(data, size, out.data(), &length, EVP_sha256(), nullptr) != 1 || length != kShaSize) {
    throw Error("OpenSSL EVP_Digest(SHA-256) failed: expected a 32-byte digest");
  }
  return out;
}

std::string to_hex(const Sha256& bytes) {
  constexpr std::string_view kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const unsigned char b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0xfu];
  }
  return out;
}

void append_le(std::string& out, std::uint64_t value, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xffu);
}

std::uint64_t read_le(const char* p, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return value;
}

bool is_hex_digest(std::string_view name) {
  return name.size() == kDigestLength &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// ".<digest>.tmp.<pid>.<n>", as store() names its temporary files.
bool is_temp_name(std::string_view name) {
  return name.size() > 1 + kDigestLength + kTempInfix.size() && name[0] == '.' &&
         is_hex_digest(name.substr(1, kDigestLength)) &&
         name.substr(1 + kDigestLength, kTempInfix.size()) == kTempInfix;
}

// Reads exactly `size` bytes unless the file ends first; returns the count
// read, or -1 with errno set.
long long read_full(int fd, char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, data + done, std::min(size - done, kMaxIoCall));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<long long>(done);
}

// Both timestamps of a touch. Set explicitly, not UTIME_NOW: on many kernels
// the file clock ticks only every few milliseconds, and eviction must order
// entries stored in quick succession.
std::array<timespec, 2> now_times() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return {now, now};
}

bool older(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

struct Listed {
  std::string name;
  std::uint64_t size = 0;
  timespec mtime{};
};

struct Listing {
  std::vector<Listed> entries;
  std::vector<std::string> stale_temps;
};

// The entries of the cache directory (names that are digests), and the
// temporary files that writers left behind. A file removed by another
// process while listing is skipped.
Listing list_directory(int dir_fd, const fs::path& directory) {
  const int raw = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0) throw IoError(directory.string() + ": cannot open to list entries: " + errno_text(errno));
  DIR* dir = ::fdopendir(raw);
  if (dir == nullptr) {
    const int error = errno;
    ::close(raw);
    throw IoError(directory.string() + ": cannot list entries: " + errno_text(error));
  }
  const time_t stale_before = ::time(nullptr) - kStaleTempSeconds;
  Listing listing;
  int error = 0;
  for (;;) {
    errno = 0;
    const dirent* item = ::readdir(dir);
    if (item == nullptr) {
      error = errno;
      break;
    }
    const std::string_view name = item->d_name;
    const bool entry = is_hex_digest(name);
    if (!entry && !is_temp_name(name)) continue;
    struct stat st {};
    if (::fstatat(dir_fd, item->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) continue;
    if (entry) {
      listing.entries.push_back({std::string(name), static_cast<std::uint64_t>(st.st_size), st.st_mtim});
    } else if (st.st_mtim.tv_sec < stale_before) {
      listing.stale_temps.emplace_back(name);
    }
  }
  ::closedir(dir);
  if (error != 0) throw IoError(directory.string() + ": cannot list entries: " + errno_text(error));
  return listing;
}

// Creates every missing component of `directory` with mode 0700 (chmod'ed
// after mkdir, so a umask cannot leave it unusable).
void create_private_directories(const fs::path& directory) {
  fs::path prefix;
  for (const fs::path& part : directory) {
    prefix /= part;
    if (part == prefix.root_path() || part.empty()) continue;
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) continue;
    if (::mkdir(prefix.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;  // another process was faster
      throw CacheError("kernel cache directory '" + directory.string() + "': cannot create '" + prefix.string() +
                       "': " + errno_text(errno));
    }
    ::chmod(prefix.c_str(), 0700);
  }
}

// Why an entry failed verification, or empty when it holds `canonical`.
struct Verdict {
  enum Kind { kValid, kCorrupt, kUnreadable } kind = kValid;
  std::string reason;
};

Verdict read_entry(int fd, std::uint64_t file_size, const std::string& canonical, std::vector<char>& payload) {
  const auto corrupt = [](std::string reason) { return Verdict{Verdict::kCorrupt, std::move(reason)}; };
  const auto unreadable = [](int error) { return Verdict{Verdict::kUnreadable, "cannot read: " + errno_text(error)}; };
  if (file_size < kHeaderSize) {
    return corrupt("truncated: " + std::to_string(file_size) + " bytes, expected at least the " +
                   std::to_string(kHeaderSize) + "-byte header");
  }
  std::array<char, kHeaderSize> header{};
  const long long got = read_full(fd, header.data(), header.size());
  if (got < 0) return unreadable(errno);
  if (static_cast<std::size_t>(got) != header.size()) return corrupt("truncated header");
  if (std::string_view(header.data(), kMagic.size()) != kMagic) return corrupt("wrong magic: expected \"ATTUNEKC\"");
  const char* p = header.data() + kMagic.size();
  const auto version = static_cast<std::uint32_t>(read_le(p, 4));
  if (version != kFormatVersion) {
    return corrupt("format version " + std::to_string(version) + ": expected " + std::to_string(kFormatVersion));
  }
  const std::uint64_t payload_size = read_le(p + 4, 8);
  Sha256 expected_sha{};
  std::memcpy(expected_sha.data(), p + 12, kShaSize);
  const std::uint64_t key_length = read_le(p + 12 + kShaSize, 4);
  // Compared without overflow: payload_size comes from the file.
  if (payload_size > file_size || file_size - payload_size != kHeaderSize + key_length) {
    return corrupt("size " + std::to_string(file_size) + " bytes: the header describes a " +
                   std::to_string(key_length) + "-byte key and a " + std::to_string(payload_size) +
                   "-byte payload (truncated or extended)");
  }
  std::string key(key_length, '\0');
  const long long key_got = read_full(fd, key.data(), key.size());
  if (key_got < 0) return unreadable(errno);
  if (key != canonical) return corrupt("holds a different key (a digest collision or a renamed file)");
  payload.resize(payload_size);
  const long long payload_got = read_full(fd, payload.data(), payload.size());
  if (payload_got < 0) return unreadable(errno);
  if (static_cast<std::uint64_t>(payload_got) != payload_size) return corrupt("truncated payload");
  if (sha256(payload.data(), payload.size()) != expected_sha) return corrupt("payload SHA-256 mismatch");
  return {};
}

}  // namespace

std::string CacheKey::canonical() const {
  const std::pair<std::string_view, const std::string*> fields[] = {
      {"template_hash", &template_hash}, {"variant_id", &variant_id}, {"dtype", &dtype}, {"arch", &arch},
      {"nvrtc_version", &nvrtc_version}, {"options", &options},
  };
  std::string out = "attune.kernel_cache.key 1\n";
  for (const auto& [name, value] : fields) {
    out += name;
    out += '=';
    out += std::to_string(value->size());
    out += ':';
    out += *value;
    out += '\n';
  }
  return out;
}

std::string CacheKey::digest() const {
  const std::string text = canonical();
  return to_hex(sha256(text.data(), text.size()));
}

fs::path KernelCache::default_directory() {
  if (std::string dir = env("ATTUNE_CACHE_DIR"); !dir.empty()) return dir;
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  if (const fs::path xdg = env("XDG_CACHE_HOME"); !xdg.empty() && xdg.is_absolute()) return xdg / "attune";
  std::string home = env("HOME");
  if (home.empty()) {
    std::vector<char> buffer(16384);
    passwd entry{};
    passwd* found = nullptr;
    if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
        found->pw_dir != nullptr) {
      home = found->pw_dir;
    }
  }
  if (home.empty()) {
    throw CacheError(
        "no kernel cache directory: ATTUNE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset and the user has no home "
        "directory: expected one of them, or KernelCache::Options::directory");
  }
  return fs::path(home) / ".cache" / "attune";
}

KernelCache::KernelCache(Options options) : options_(std::move(options)) {
  fs::path dir = options_.directory.empty() ? default_directory() : options_.directory;
  std::error_code ec;
  directory_ = fs::absolute(dir, ec);
  if (ec) directory_ = dir;
  const std::string what = "kernel cache directory '" + directory_.string() + "'";

  create_private_directories(directory_);
  struct stat st {};
  if (::stat(directory_.c_str(), &st) != 0) throw CacheError(what + ": cannot stat: " + errno_text(errno));
  if (!S_ISDIR(st.st_mode)) throw CacheError(what + " is " + file_type(st.st_mode) + ": expected a directory");
  const int raw = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0) throw CacheError(what + ": cannot open: " + errno_text(errno));
  Fd dir_fd(raw);
  // Checked on the open descriptor: the directory used is the one checked.
  if (::fstat(dir_fd.get(), &st) != 0) throw CacheError(what + ": cannot stat: " + errno_text(errno));
  if (st.st_uid != ::geteuid()) {
    throw CacheError(what + " is owned by uid " + std::to_string(st.st_uid) + ": expected the current user (uid " +
                     std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & kGroupOtherWrite) != 0) {
    throw CacheError(what + " has mode " + octal_mode(st.st_mode) + " (writable by " + writable_by(st.st_mode) +
                     "): expected a directory only its owner can write, mode 0700");
  }
  // A read-only directory (a read-only mount, no permission) would fail
  // every store later with a less direct message, and recompile every run.
  if (::faccessat(dir_fd.get(), ".", W_OK, AT_EACCESS) != 0) {
    throw CacheError(what + " cannot be written (" + errno_text(errno) +
                     "): expected a directory this user can write; set ATTUNE_CACHE_DIR to one");
  }
  dir_fd_ = dir_fd.release();
}

KernelCache::~KernelCache() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::optional<std::vector<char>> KernelCache::load(const CacheKey& key) {
  const std::string digest = key.digest();
  if (options_.memory) {
    std::unique_lock lock(mutex_);
    if (const auto it = memory_.find(digest); it != memory_.end()) {
      it->second.last_use = ++use_clock_;
      ++stats_.memory_hits;
      std::vector<char> binary = it->second.binary;
      lock.unlock();
      // Keeps the entry recent on disk too; it may be gone, which is fine.
      const auto times = now_times();
      ::utimensat(dir_fd_, digest.c_str(), times.data(), AT_SYMLINK_NOFOLLOW);
      return binary;
    }
  }

  const std::string path = (directory_ / digest).string();
  enum class Outcome { kHit, kMiss, kRefused, kDiscarded };
  Outcome outcome = Outcome::kMiss;
  std::string problem;
  std::vector<char> payload;

  const int raw = ::openat(dir_fd_, digest.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (raw < 0) {
    const int error = errno;
    if (error == ELOOP) {
      outcome = Outcome::kRefused;
      problem = "kernel cache entry '" + path + "' is a symbolic link: expected a regular file";
    } else if (error != ENOENT) {  // ENOENT: never stored, or removed by another process
      problem = "kernel cache entry '" + path + "': cannot open: " + errno_text(error);
    }
  } else {
    Fd file(raw);
    struct stat st {};
    if (::fstat(file.get(), &st) != 0) {
      problem = "kernel cache entry '" + path + "': cannot stat: " + errno_text(errno);
    } else if (!S_ISREG(st.st_mode)) {
      outcome = Outcome::kRefused;
      problem = "kernel cache entry '" + path + "' is " + file_type(st.st_mode) + ": expected a regular file";
    } else if (st.st_uid != ::geteuid()) {
      // Another user's binary would run on the GPU as ours.
      outcome = Outcome::kRefused;
      problem = "kernel cache entry '" + path + "' is owned by uid " + std::to_string(st.st_uid) +
                ": expected the current user (uid " + std::to_string(::geteuid()) + ")";
    } else if ((st.st_mode & kGroupOtherWrite) != 0) {
      outcome = Outcome::kRefused;
      problem = "kernel cache entry '" + path + "' has mode " + octal_mode(st.st_mode) + " (writable by " +
                writable_by(st.st_mode) + "): expected mode 0600";
    } else {
      const Verdict verdict = read_entry(file.get(), static_cast<std::uint64_t>(st.st_size), key.canonical(), payload);
      if (verdict.kind == Verdict::kValid) {
        outcome = Outcome::kHit;
        const auto times = now_times();
        ::futimens(file.get(), times.data());  // recency for eviction; best effort
      } else if (verdict.kind == Verdict::kUnreadable) {
        problem = "kernel cache entry '" + path + "': " + verdict.reason;
      } else {
        outcome = Outcome::kDiscarded;
        problem = "kernel cache entry '" + path + "' discarded: " + verdict.reason;
        // Delete only the file that was read: another process may have just
        // renamed a good entry over it.
        struct stat now {};
        if (::fstatat(dir_fd_, digest.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
            now.st_ino == st.st_ino) {
          ::unlinkat(dir_fd_, digest.c_str(), 0);
        }
      }
    }
  }

  std::lock_guard lock(mutex_);
  if (!problem.empty()) last_problem_ = problem;
  switch (outcome) {
    case Outcome::kHit:
      ++stats_.disk_hits;
      remember(digest, payload);
      return payload;
    case Outcome::kRefused:
      ++stats_.refused;
      break;
    case Outcome::kDiscarded:
      ++stats_.discarded;
      break;
    case Outcome::kMiss:
      break;
  }
  ++stats_.misses;
  return std::nullopt;
}

void KernelCache::store(const CacheKey& key, std::span<const char> binary) {
  const std::string digest = key.digest();
  const std::string canonical = key.canonical();
  const std::string path = (directory_ / digest).string();

  std::string header(kMagic);
  append_le(header, kFormatVersion, 4);
  append_le(header, binary.size(), 8);
  const Sha256 sha = sha256(binary.data(), binary.size());
  header.append(reinterpret_cast<const char*>(sha.data()), sha.size());
  append_le(header, canonical.size(), 4);
  header += canonical;

  const std::span<const std::byte> pieces[] = {std::as_bytes(std::span(header)), std::as_bytes(binary)};
  try {
    io::write_file_atomically(digest, pieces,
                              {.mode = 0600,
                               .directory_fd = dir_fd_,
                               .no_follow = true,
                               .temp_infix = std::string(kTempInfix),
                               .precise_mtime = true});
  } catch (const IoError& e) {
    throw IoError("kernel cache entry '" + path + "': " + std::string(e.what()).substr(digest.size() + 2));
  }

  {
    std::lock_guard lock(mutex_);
    ++stats_.stores;
    remember(digest, std::vector<char>(binary.begin(), binary.end()));
  }
  evict_from_disk(digest);
}

void KernelCache::remember(const std::string& digest, std::vector<char> binary) {
  if (!options_.memory) return;
  MemoryEntry& entry = memory_[digest];
  memory_bytes_ -= entry.binary.size();
  entry.binary = std::move(binary);
  entry.last_use = ++use_clock_;
  memory_bytes_ += entry.binary.size();
  while (memory_bytes_ > options_.max_bytes && memory_.size() > 1) {
    auto oldest = memory_.end();
    for (auto it = memory_.begin(); it != memory_.end(); ++it) {
      if (it->first != digest && (oldest == memory_.end() || it->second.last_use < oldest->second.last_use)) {
        oldest = it;
      }
    }
    memory_bytes_ -= oldest->second.binary.size();
    memory_.erase(oldest);
  }
}

void KernelCache::evict_from_disk(const std::string& keep) {
  Listing listing = list_directory(dir_fd_, directory_);
  for (const std::string& temp : listing.stale_temps) ::unlinkat(dir_fd_, temp.c_str(), 0);

  std::uint64_t total = 0;
  for (const Listed& entry : listing.entries) total += entry.size;
  if (total <= options_.max_bytes) return;
  std::sort(listing.entries.begin(), listing.entries.end(), [](const Listed& a, const Listed& b) {
    if (older(a.mtime, b.mtime) || older(b.mtime, a.mtime)) return older(a.mtime, b.mtime);
    return a.name < b.name;
  });
  std::uint64_t evicted = 0;
  for (const Listed& entry : listing.entries) {
    if (total <= options_.max_bytes) break;
    if (entry.name == keep) continue;
    if (::unlinkat(dir_fd_, entry.name.c_str(), 0) == 0) {
      ++evicted;
    } else if (errno != ENOENT) {  // ENOENT: another process evicted it first
      throw IoError("kernel cache entry '" + (directory_ / entry.name).string() +
                    "': cannot delete to stay within max_bytes: " + errno_text(errno));
    }
    total -= entry.size;
  }

  // The memory layer keeps its own LRU: a binary evicted from disk but still
  // in memory is valid, and serving it saves a recompile.
  std::lock_guard lock(mutex_);
  stats_.evictions += evicted;
}

CacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::uint64_t KernelCache::disk_bytes() const {
  std::uint64_t total = 0;
  for (const Listed& entry : list_directory(dir_fd_, directory_).entries) total += entry.size;
  return total;
}

std::size_t KernelCache::disk_entries() const { return list_directory(dir_fd_, directory_).entries.size(); }

std::string KernelCache::last_problem() const {
  std::lock_guard lock(mutex_);
  return last_problem_;
}

}  // namespace attune
