// What every fuzz target shares: inputs as files without touching the disk,
// a scratch directory, and invariant checks that abort (so libFuzzer reports
// them as crashes with the input that broke them).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace attune::fuzz {

// Aborts with the message when `ok` is false: a broken invariant is a
// finding, like a crash.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

// The input as a readable file: a memfd, named through /proc/self/fd.
// Closed when the object goes.
class MemoryFile {
 public:
  MemoryFile(const std::uint8_t* data, std::size_t size) : fd_(::memfd_create("attune-fuzz", MFD_CLOEXEC)) {
    check(fd_ >= 0, "memfd_create");
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      check(n > 0, "write to memfd");
      done += static_cast<std::size_t>(n);
    }
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// A private directory for the whole run ($TMPDIR or /tmp), removed at exit.
inline const std::filesystem::path& scratch_directory() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/attune-fuzz-XXXXXX";
    check(::mkdtemp(pattern.data()) != nullptr, "mkdtemp");
    static const std::filesystem::path made = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(made, ignored);
    });
    return made;
  }();
  return dir;
}

}  // namespace attune::fuzz
