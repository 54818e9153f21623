// attune-gen against templates that break each rule: it must fail with a
// clang diagnostic at the offending line. The real templates pass.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
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
    fs::copy(fs::path(ATTUNE_SOURCE_DIR) / "templates" / "fp8.h", root_ / "templates" / "fp8.h");  // cuda.h's
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

// attune-gen accepted the template and printed `summary`.
void expect_accepted(const GenRun& r, const std::string& summary) {
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(summary), std::string::npos) << r.output;
}

// attune-gen rejected the template with each of `diagnostics`.
void expect_rejected(const GenRun& r, std::initializer_list<const char*> diagnostics) {
  EXPECT_EQ(r.status, 1) << r.output;
  for (const char* diagnostic : diagnostics) EXPECT_NE(r.output.find(diagnostic), std::string::npos) << r.output;
}

// Line numbers in probe.cuh: the body starts on line 15 when `extra` is empty.
TEST_F(AttuneGenTest, CleanTemplatePasses) {
  expect_accepted(check("  float acc[4];\n  ATTUNE_UNROLL\n  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;\n"
                        "  dev::block::sync();\n  dev::store_global(p.out, acc[0] + acc[3]);"),
                  "attune::probe (1 tunables");
}

TEST_F(AttuneGenTest, StaticSharedArrayIsRejected) {
  expect_rejected(check("  __shared__ float tile[kTile];\n  dev::store_shared(tile, 1.0f);"),
                  {"probe.cuh:15:20: error: static __shared__ variable 'tile'"});
}

TEST_F(AttuneGenTest, InlineAsmIsRejected) {
  expect_rejected(check("  asm volatile(\"bar.sync 0;\");"),
                  {"probe.cuh:15:3: error: inline asm outside templates/primitives/"});
}

TEST_F(AttuneGenTest, HardwareIntrinsicsOutsidePrimitivesAreRejected) {
  expect_rejected(
      check("  __syncthreads();\n  float x = __shfl_xor_sync(0xffffffffu, 1.0f, 1);\n  dev::store_global(p.out, x);"),
      {"probe.cuh:15:3: error: call to '__syncthreads' outside templates/primitives/",
       "probe.cuh:16:13: error: call to '__shfl_xor_sync'"});
}

TEST_F(AttuneGenTest, RuntimeIndexedRegisterArrayIsRejected) {
  expect_rejected(check("  float acc[4] = {0, 0, 0, 0};\n  const int lane = dev::lane_id();\n"
                        "  dev::store_global(p.out, acc[lane % 4]);"),
                  {"probe.cuh:17:32: error: register array indexed by 'lane'"});
}

TEST_F(AttuneGenTest, LoopWithoutUnrollIsRejected) {
  expect_rejected(
      check("  float acc[4];\n  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;\n  dev::store_global(p.out, acc[0]);"),
      {"probe.cuh:16:35: error: register array indexed by 'i'"});
}

TEST_F(AttuneGenTest, RawPointerAccessIsRejected) {
  expect_rejected(check("  p.out[0] = 1.0f;\n  *p.out = 2.0f;"),
                  {"probe.cuh:15:3: error: memory accessed through a raw pointer subscript",
                   "probe.cuh:16:3: error: memory accessed through a raw pointer"});
}

TEST_F(AttuneGenTest, TunableAsRuntimeArgumentIsRejected) {
  expect_rejected(check("  dev::store_global(p.out, 1.0f);", "", "int tile; "),
                  {"error: field 'tile' of attune::ProbeParams carries tunable kTile"});
}

TEST_F(AttuneGenTest, RealTemplatesPass) {
  expect_accepted(run(gen_command(ATTUNE_SOURCE_DIR, std::string(ATTUNE_SOURCE_DIR) + "/templates/flash_fwd.cuh")),
                  "attune::flash_fwd (7 tunables");
}

}  // namespace
