#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace attune::io {

namespace {

constexpr std::size_t kMaxIoCall = std::size_t{1} << 30;  // Linux moves at most ~2 GiB per write
std::atomic<unsigned long long> g_counter{0};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }
  int get() const { return fd_; }
  int close() {
    if (fd_ < 0) return 0;
    const int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

}  // namespace

std::string errno_text(int error) {
  std::array<char, 256> buffer{};
  // The GNU strerror_r returns the message (maybe not in the buffer).
  return ::strerror_r(error, buffer.data(), buffer.size());
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces,
                           const AtomicWriteOptions& options) {
  const std::string name = path.filename().string();
  if (name.empty() || name == "." || name == "..") throw IoError(path.string() + ": cannot write: not a file name");
  const bool relative_to_fd = options.directory_fd >= 0;
  const std::filesystem::path directory =
      relative_to_fd ? std::filesystem::path() : (path.has_parent_path() ? path.parent_path() : ".");
  const int at = relative_to_fd ? options.directory_fd : AT_FDCWD;
  const auto shown = [&](const std::string& file) { return relative_to_fd ? file : (directory / file).string(); };

  std::string temp;
  int raw = -1;
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (options.no_follow ? O_NOFOLLOW : 0);
  for (int attempt = 0; raw < 0; ++attempt) {
    temp = "." + name + options.temp_infix + std::to_string(::getpid()) + "." + std::to_string(g_counter++);
    raw = ::openat(at, (relative_to_fd ? temp : (directory / temp).string()).c_str(), flags,
                   static_cast<mode_t>(options.mode));
    if (raw < 0 && (errno != EEXIST || attempt >= 100)) {
      throw IoError(path.string() + ": cannot create temporary file '" + shown(temp) + "': " + errno_text(errno));
    }
  }
  const std::string temp_path = relative_to_fd ? temp : (directory / temp).string();
  Fd file(raw);
  const auto fail = [&](const std::string& action, int error) {
    file.close();
    ::unlinkat(at, temp_path.c_str(), 0);
    throw IoError(path.string() + ": cannot " + action + " temporary file '" + shown(temp) + "': " + errno_text(error));
  };
  for (const auto piece : pieces) {
    std::size_t written = 0;
    while (written < piece.size()) {
      const ssize_t n = ::write(file.get(), piece.data() + written, std::min(piece.size() - written, kMaxIoCall));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write", errno);
      }
      written += static_cast<std::size_t>(n);
    }
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at
  // an empty or partial file.
  if (options.precise_mtime) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const timespec times[2] = {now, now};
    if (::futimens(file.get(), times) != 0) fail("set the time of", errno);
  }
  if (::fsync(file.get()) != 0) fail("fsync", errno);
  if (file.close() != 0) fail("close", errno);
  const std::string target = relative_to_fd ? name : path.string();
  if (::renameat(at, temp_path.c_str(), at, target.c_str()) != 0) {
    const int error = errno;
    ::unlinkat(at, temp_path.c_str(), 0);
    throw IoError(path.string() + ": cannot rename temporary file '" + shown(temp) + "' over it: " + errno_text(error));
  }
  // Persists the rename; the data is already safe, so best effort.
  if (relative_to_fd) {
    ::fsync(options.directory_fd);
  } else if (const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text,
                           const AtomicWriteOptions& options) {
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  write_file_atomically(path, std::span<const std::span<const std::byte>>(&piece, 1), options);
}

}  // namespace attune::io
