// Kernel-cache entries (runtime/jit/kernel_cache.h) as they may be found on
// disk: arbitrary bytes, or a real entry with bytes changed, cut or added.
// Invariants: loading never crashes; an entry that loads is exactly the
// encoding of its key and binary (anything else is discarded and deleted);
// what is stored loads back.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "runtime/jit/kernel_cache.h"
#include "tests/support/file_bytes.h"

using namespace attune;
namespace fs = std::filesystem;

namespace {

using attune::testing::read_bytes;

void write_bytes(const fs::path& path, const std::string& bytes) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const fs::path dir = fuzz::scratch_directory() / "cache";
  const fs::path fresh_dir = fuzz::scratch_directory() / "fresh";
  fs::remove_all(dir);
  fs::remove_all(fresh_dir);
  CacheKey key{in.ConsumeRandomLengthString(80), in.ConsumeRandomLengthString(60), in.ConsumeRandomLengthString(8),
               in.ConsumeRandomLengthString(8),  in.ConsumeRandomLengthString(8),  in.ConsumeRandomLengthString(40)};
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  KernelCache cache({.directory = dir, .memory = false});
  const fs::path entry = dir / key.digest();
  if (mode == 0) {  // whatever bytes, as an entry file
    write_bytes(entry, in.ConsumeRemainingBytesAsString());
  } else {
    const std::string binary = in.ConsumeRandomLengthString(512);
    cache.store(key, std::span<const char>(binary.data(), binary.size()));
    const std::optional<std::vector<char>> back = cache.load(key);
    fuzz::check(back.has_value() && std::string(back->begin(), back->end()) == binary, "store then load");
    if (mode == 2) return 0;
    std::string bytes = read_bytes(entry);  // then changed: flips, a cut, a tail
    while (in.remaining_bytes() > 2) {
      const int edit = in.ConsumeIntegralInRange<int>(0, 2);
      const std::size_t at = in.ConsumeIntegralInRange<std::size_t>(0, bytes.size());
      if (edit == 0 && at < bytes.size()) bytes[at] = static_cast<char>(bytes[at] ^ in.ConsumeIntegral<char>());
      if (edit == 1) bytes.resize(at);
      if (edit == 2) bytes += in.ConsumeRandomLengthString(16);
    }
    write_bytes(entry, bytes);
  }
  const std::string on_disk = read_bytes(entry);
  const std::optional<std::vector<char>> loaded = cache.load(key);
  if (!loaded) {
    fuzz::check(!fs::exists(entry), "a bad entry was left on disk");
    return 0;
  }
  // It loaded: the file must be the canonical entry of (key, binary).
  KernelCache fresh({.directory = fresh_dir, .memory = false});
  fresh.store(key, std::span<const char>(loaded->data(), loaded->size()));
  fuzz::check(read_bytes(fresh_dir / key.digest()) == on_disk, "a non-canonical entry was accepted");
  return 0;
}
