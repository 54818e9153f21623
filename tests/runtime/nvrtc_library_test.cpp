// Where NVRTC is looked for, in the documented order, and what happens with a
// candidate that is not NVRTC. (Each test runs in its own process under
// CTest, so each starts with no NVRTC loaded. Hiding every NVRTC of the
// machine is done by tools/gpu_rehearsal.sh, in a mount namespace.)
#include "runtime/jit/nvrtc_library.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/env_guard.h"
#include "tests/support/temp_dir.h"

namespace attune::nvrtc {
namespace {

namespace fs = std::filesystem;

class NvrtcLibraryTest : public ::testing::Test {
 protected:
  // An empty file that only looks like a library.
  fs::path touch(const fs::path& relative) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "not a library";
    return path;
  }

  testing::TempDir temp_{"attune-nvrtc-test"};
  const fs::path root_ = temp_.path();
  testing::EnvGuard env_{{"ATTUNE_NVRTC", "CUDA_HOME", "ATTUNE_PYTHON_SITE"}};
};

TEST_F(NvrtcLibraryTest, CandidatesFollowTheDocumentedOrder) {
  const fs::path given = touch("given/libnvrtc.so.13");
  touch("given/libnvrtc-builtins.so.13.0");  // not NVRTC itself: never a candidate
  const fs::path home12 = touch("toolkit/lib64/libnvrtc.so.12");
  const fs::path home13 = touch("toolkit/lib64/libnvrtc.so.13");
  const fs::path bare = touch("toolkit/lib64/libnvrtc.so");
  touch("toolkit/lib64/libnvrtc.alt.so.13");
  const fs::path pip13 = touch("site/nvidia/cu13/lib/libnvrtc.so.13");
  const fs::path pip12 = touch("site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  setenv("ATTUNE_NVRTC", (root_ / "given").c_str(), 1);
  setenv("CUDA_HOME", (root_ / "toolkit").c_str(), 1);
  setenv("ATTUNE_PYTHON_SITE", ("/no/such/dir:" + (root_ / "site").string()).c_str(), 1);

  std::vector<std::string> sources;
  std::vector<std::string> paths;
  for (const Candidate& c : candidates()) {
    sources.push_back(c.source);
    paths.push_back(c.path);
  }
  // ATTUNE_NVRTC, then CUDA_HOME newest first, then (maybe) /usr/local/cuda,
  // then pip's layouts, then the loader's search path.
  ASSERT_GE(paths.size(), 9U);
  EXPECT_EQ(paths[0], given.string());
  EXPECT_EQ(sources[0], "ATTUNE_NVRTC");
  EXPECT_EQ(paths[1], home13.string());
  EXPECT_EQ(paths[2], home12.string());
  EXPECT_EQ(paths[3], bare.string());
  EXPECT_EQ(sources[1], "CUDA_HOME");
  const auto at = [&](const fs::path& p) { return std::find(paths.begin(), paths.end(), p.string()) - paths.begin(); };
  EXPECT_LT(at(bare), at(pip13));
  EXPECT_LT(at(bare), at(pip12));
  EXPECT_LT(static_cast<std::size_t>(at(pip13)), paths.size());
  EXPECT_LT(static_cast<std::size_t>(at(pip12)), paths.size());
  EXPECT_EQ(sources[static_cast<std::size_t>(at(pip13))], "python site-packages");
  EXPECT_EQ(paths[paths.size() - 3], "libnvrtc.so.13");
  EXPECT_EQ(sources.back(), "system search path");
  for (const std::string& p : paths) {
    EXPECT_EQ(p.find("builtins"), std::string::npos) << p;
    EXPECT_EQ(p.find(".alt."), std::string::npos) << p;
  }
}

TEST_F(NvrtcLibraryTest, AFileThatIsNotNvrtcIsPassedOverForTheNextCandidate) {
  setenv("ATTUNE_NVRTC", touch("fake/libnvrtc.so.13").c_str(), 1);
  std::string why;
  if (!available(&why)) {
    // No real NVRTC on this machine: the one line names the fake and why.
    EXPECT_NE(why.find(root_.string() + "/fake/libnvrtc.so.13"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    return;
  }
  const Library& lib = library();
  EXPECT_NE(lib.path, (root_ / "fake/libnvrtc.so.13").string());
  EXPECT_GE(lib.major, 11) << lib.version;
  EXPECT_EQ(lib.version, std::to_string(lib.major) + "." + std::to_string(lib.minor));
}

TEST_F(NvrtcLibraryTest, AnExplicitDirectoryWithoutNvrtcIsNamedInTheSearch) {
  fs::create_directories(root_ / "empty");
  setenv("ATTUNE_NVRTC", (root_ / "empty").c_str(), 1);
  unsetenv("CUDA_HOME");
  for (const Candidate& c : candidates()) EXPECT_NE(c.source, "ATTUNE_NVRTC") << c.path;
}

}  // namespace
}  // namespace attune::nvrtc
