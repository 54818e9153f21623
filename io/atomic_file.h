// Files replaced atomically, the one way attune writes what a crash must not
// leave half-written (kernel-cache entries, .npy outputs, exported tuning
// data, reports, generated sources): a temporary file beside the target
// (created with O_EXCL), every byte written, fsync, rename over the target,
// then fsync of the directory. Readers see the old file or the new one.
//
//   attune::io::write_file_atomically("out/o.npy", {header_bytes, data_bytes});
//   attune::io::write_file_atomically("report.html", html);
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace attune::io {

struct AtomicWriteOptions {
  unsigned mode = 0666;              // of a new file, before the umask
  int directory_fd = -1;             // >= 0: `path` is a name inside this open directory (openat/renameat)
  bool no_follow = false;            // refuse a temporary name that is a symbolic link (O_NOFOLLOW)
  std::string temp_infix = ".tmp.";  // temporary name: "." + name + infix + pid.counter
  // Stamp the file with CLOCK_REALTIME before the rename. The kernel's own
  // file clock ticks only every few milliseconds, so files written in quick
  // succession would share an mtime; the kernel cache orders eviction by it.
  bool precise_mtime = false;
};

// Throws IoError naming `path`, the temporary file and the step that failed
// ("cannot write temporary file '...': No space left on device"); the
// temporary file is removed first, so nothing partial is left behind.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::span<const std::byte>> pieces,
                           const AtomicWriteOptions& options = {});
void write_file_atomically(const std::filesystem::path& path, std::string_view text,
                           const AtomicWriteOptions& options = {});

// strerror(error), thread-safe.
std::string errno_text(int error);

}  // namespace attune::io
