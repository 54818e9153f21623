// The compiler service: one compile per binary however many ask at once,
// results through the kernel cache, a failed compile as a value.
#include "runtime/jit/compiler_service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/dispatch/heuristics.h"
#include "tests/support/temp_dir.h"

namespace attune {
namespace {

namespace fs = std::filesystem;

// Each test's kernel cache lives in a directory of its own.
class CompilerServiceTest : public ::testing::Test {
 protected:
  testing::TempDir temp_{"attune_compiler_test"};
  const fs::path dir_ = temp_.path();
};

// The portable family: these tests compile it for sm_80 too.
const Variant kVariant =
    heuristic_variant("fwd", DType::kBF16, 64, 64, require_arch("sm_90a"), 0, {.portable_only = true});

TEST_F(CompilerServiceTest, ConcurrentRequestsShareOneCompile) {
  KernelCache cache({.directory = dir_});
  CompilerService service(&cache, 2);
  std::vector<CompilerService::Result> results(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = service.compile({kVariant, DType::kBF16, "sm_90a"}).get(); });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(results[0]->ok) << results[0]->log;
  for (const auto& r : results) EXPECT_EQ(r, results[0]);  // the very same result object
  EXPECT_EQ(service.stats().compiles, 1U);
  EXPECT_EQ(service.stats().requests, 8U);
  EXPECT_EQ(service.stats().shared, 7U);
  EXPECT_FALSE(results[0]->lowered_name.empty());
  EXPECT_GT(results[0]->registers, 0);
  // Another dtype is another binary.
  EXPECT_TRUE(service.compile({kVariant, DType::kF16, "sm_90a"}).get()->ok);
  EXPECT_EQ(service.stats().compiles, 2U);
}

TEST_F(CompilerServiceTest, SecondProcessLoadsFromTheDiskCache) {
  {
    KernelCache cache({.directory = dir_});
    CompilerService service(&cache, 1);
    ASSERT_TRUE(service.compile({kVariant, DType::kBF16, "sm_80"}).get()->ok);
  }
  KernelCache cache({.directory = dir_});
  CompilerService service(&cache, 1);
  const CompilerService::Result r = service.compile({kVariant, DType::kBF16, "sm_80"}).get();
  ASSERT_TRUE(r->ok) << r->log;
  EXPECT_TRUE(r->from_cache);
  EXPECT_EQ(service.stats().compiles, 0U);
  EXPECT_FALSE(r->cubin.empty());
  EXPECT_FALSE(r->lowered_name.empty());
}

TEST_F(CompilerServiceTest, TwoProcessesCompilingTheSameVariantLeaveOneEntry) {
  std::vector<pid_t> children;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: its own cache and service on the shared directory.
      KernelCache cache({.directory = dir_});
      CompilerService service(&cache, 1);
      const bool ok = service.compile({kVariant, DType::kBF16, "sm_80"}).get()->ok;
      std::_Exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  KernelCache cache({.directory = dir_});
  EXPECT_EQ(cache.disk_entries(), 1U);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1U);  // no temporary left behind
}

TEST_F(CompilerServiceTest, FailedCompileIsAValueWithItsLog) {
  CompilerService service(nullptr, 1);
  const CompilerService::Result r = service.compile({kVariant, DType::kBF16, "sm_20"}).get();
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->log.find("sm_20"), std::string::npos) << r->log;
}

TEST_F(CompilerServiceTest, CacheKeyNamesEverythingThatChangesTheBinary) {
  const CacheKey a = CompilerService::cache_key({kVariant, DType::kBF16, "sm_90a"});
  EXPECT_EQ(a.variant_id, kVariant.id());
  EXPECT_EQ(a.template_hash, std::string(kVariant.kernel->source_hash));
  EXPECT_NE(a.digest(), CompilerService::cache_key({kVariant, DType::kF16, "sm_90a"}).digest());
  EXPECT_NE(a.digest(), CompilerService::cache_key({kVariant, DType::kBF16, "sm_80"}).digest());
  const Variant other = enumerate_variants("fwd", DType::kBF16, 64, 64, require_arch("sm_90a")).front();
  ASSERT_NE(other, kVariant);
  EXPECT_NE(a.digest(), CompilerService::cache_key({other, DType::kBF16, "sm_90a"}).digest());
}

TEST(CompiledKernelTest, SerializationRoundTripsAndRejectsTruncation) {
  CompiledKernel k{.ok = true, .lowered_name = "_Z3foo", .cubin = {'a', 'b', 'c'}, .registers = 77, .spill_bytes = 4};
  const std::vector<char> bytes = serialize(k);
  const CompiledKernel back = deserialize(bytes);
  EXPECT_EQ(back.lowered_name, k.lowered_name);
  EXPECT_EQ(back.cubin, k.cubin);
  EXPECT_EQ(back.registers, 77);
  EXPECT_EQ(back.spill_bytes, 4);
  EXPECT_THROW(deserialize(std::span(bytes).first(5)), IoError);
}

}  // namespace
}  // namespace attune
