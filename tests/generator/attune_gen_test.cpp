// attune-gen against templates that break each rule: it must fail with a
// clang diagnostic at the offending line. The real templates pass.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct GenRun {
  int status = -1;
  std::string output;
};

GenRun run(const std::string& command) {
  GenRun r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.output += buffer.data();
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string gen_command(const std::string& root, const std::string& file) {
  return std::string(ATTUNE_GEN) + " --root " + root + " --prelude " + ATTUNE_GEN_PRELUDE + " --resource-dir " +
         ATTUNE_CLANG_RESOURCE_DIR + " " + file;
}

// A scratch project root holding the real primitives and one test template.
class AttuneGenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("attune_gen_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "templates");
    fs::copy(fs::path(ATTUNE_SOURCE_DIR) / "templates" / "primitives", root_ / "templates" / "primitives",
             fs::copy_options::recursive);
    fs::copy(fs::path(ATTUNE_SOURCE_DIR) / "templates" / "mask.h", root_ / "templates" / "mask.h");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes a template whose kernel body is `body` (plus `extra` before it).
  GenRun check(const std::string& body, const std::string& extra = "", const std::string& params_fields = "") {
    const fs::path file = root_ / "templates" / "probe.cuh";
    std::ofstream out(file);
    out << "#pragma once\n#include \"templates/primitives/primitives.h\"\nnamespace attune {\n"
        << "struct ProbeParams { float* out; " << params_fields << "};\n"
        << "struct ProbeTunables {\n"
        << "  static constexpr int kTile[] = {32, 64};\n"
        << "  static constexpr const char* kIdKeys[] = {\"t\"};\n"
        << "  ATTUNE_HOST_DEVICE static constexpr bool valid(int) { return true; }\n"
        << "  ATTUNE_HOST_DEVICE static constexpr int threads(int) { return 32; }\n"
        << "  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int t) { return 4 * t; }\n"
        << "};\n"
        << extra << "\n"
        << "template <int kTile, class DType>\nATTUNE_KERNEL void probe(ProbeParams p) {\n"
        << body << "\n}\n}  // namespace attune\n";
    out.close();
    return run(gen_command(root_.string(), file.string()));
  }

  fs::path root_;
};

// Line numbers in probe.cuh: the body starts on line 15 when `extra` is empty.
TEST_F(AttuneGenTest, CleanTemplatePasses) {
  const GenRun r = check(
      "  float acc[4];\n  ATTUNE_UNROLL\n  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;\n"
      "  dev::block::sync();\n  dev::store_global(p.out, acc[0] + acc[3]);");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("attune::probe (1 tunables"), std::string::npos) << r.output;
}

TEST_F(AttuneGenTest, StaticSharedArrayIsRejected) {
  const GenRun r = check("  __shared__ float tile[kTile];\n  dev::store_shared(tile, 1.0f);");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:15:20: error: static __shared__ variable 'tile'"), std::string::npos) << r.output;
}

TEST_F(AttuneGenTest, InlineAsmIsRejected) {
  const GenRun r = check("  asm volatile(\"bar.sync 0;\");");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:15:3: error: inline asm outside templates/primitives/"), std::string::npos)
      << r.output;
}

TEST_F(AttuneGenTest, HardwareIntrinsicsOutsidePrimitivesAreRejected) {
  const GenRun r =
      check("  __syncthreads();\n  float x = __shfl_xor_sync(0xffffffffu, 1.0f, 1);\n  dev::store_global(p.out, x);");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:15:3: error: call to '__syncthreads' outside templates/primitives/"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("probe.cuh:16:13: error: call to '__shfl_xor_sync'"), std::string::npos) << r.output;
}

TEST_F(AttuneGenTest, RuntimeIndexedRegisterArrayIsRejected) {
  const GenRun r = check(
      "  float acc[4] = {0, 0, 0, 0};\n  const int lane = dev::lane_id();\n"
      "  dev::store_global(p.out, acc[lane % 4]);");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:17:32: error: register array indexed by 'lane'"), std::string::npos) << r.output;
}

TEST_F(AttuneGenTest, LoopWithoutUnrollIsRejected) {
  const GenRun r =
      check("  float acc[4];\n  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;\n  dev::store_global(p.out, acc[0]);");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:16:35: error: register array indexed by 'i'"), std::string::npos) << r.output;
}

TEST_F(AttuneGenTest, RawPointerAccessIsRejected) {
  const GenRun r = check("  p.out[0] = 1.0f;\n  *p.out = 2.0f;");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("probe.cuh:15:3: error: memory accessed through a raw pointer subscript"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("probe.cuh:16:3: error: memory accessed through a raw pointer"), std::string::npos)
      << r.output;
}

TEST_F(AttuneGenTest, TunableAsRuntimeArgumentIsRejected) {
  const GenRun r = check("  dev::store_global(p.out, 1.0f);", "", "int tile; ");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("error: field 'tile' of attune::ProbeParams carries tunable kTile"), std::string::npos)
      << r.output;
}

TEST_F(AttuneGenTest, RealTemplatesPass) {
  const GenRun r = run(gen_command(ATTUNE_SOURCE_DIR, std::string(ATTUNE_SOURCE_DIR) + "/templates/flash_fwd.cuh"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("attune::flash_fwd (7 tunables"), std::string::npos) << r.output;
}

}  // namespace
