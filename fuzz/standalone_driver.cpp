// A driver for a fuzz target built without libFuzzer (the main build, where
// the emulator's kernels are): seeded random inputs, then any input files
// named on the command line (a corpus, or a crash to replay).
//
//   paged_bounds_fuzzer [--runs N] [--seed S] [--max-len BYTES] [FILE...]
//
// An input that breaks an invariant aborts (fuzz_support.h), as under
// libFuzzer; the driver prints the run's seed and number first, so the input
// can be made again.
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// Which input broke an invariant: printed from the abort it ends with.
char g_current[128] = "before the first input";

void say_which(int) {
  const char prefix[] = "\nfuzz driver: the failing input is ";
  (void)!::write(2, prefix, sizeof(prefix) - 1);
  (void)!::write(2, g_current, std::strlen(g_current));
  (void)!::write(2, "\n", 1);
  std::signal(SIGABRT, SIG_DFL);
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 200;
  unsigned long seed = 1;
  std::size_t max_len = 256;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--max-len" && i + 1 < argc) {
      max_len = std::strtoul(argv[++i], nullptr, 10);
    } else {
      files.push_back(a);
    }
  }
  std::signal(SIGABRT, say_which);
  for (const std::string& f : files) {
    std::snprintf(g_current, sizeof(g_current), "the file %s", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("input %s (%zu bytes)\n", f.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> input;
  for (long run = 0; run < runs; ++run) {
    input.resize(static_cast<std::size_t>(rng() % (max_len + 1)));
    for (std::uint8_t& b : input) b = static_cast<std::uint8_t>(rng());
    std::snprintf(g_current, sizeof(g_current), "--seed %lu, run %ld (of --runs %ld)", seed, run, runs);
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("%ld random inputs (seed %lu) and %zu files: every invariant held\n", runs, seed, files.size());
  return 0;
}
