// The JIT service: compiles variants with NVRTC on a thread pool. Concurrent
// requests for the same binary share one compile; binaries go through the
// kernel cache (memory and disk). A failed compile is a value with its log.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "generator/variants.h"
#include "runtime/jit/kernel_cache.h"

namespace attune {

struct CompiledKernel {
  bool ok = false;
  std::string log;           // NVRTC and ptxas output (the error when !ok)
  std::string lowered_name;  // entry point in the cubin
  std::vector<char> cubin;
  int registers = -1;
  int spill_bytes = 0;
  double compile_seconds = 0;  // 0 when it came from the cache
  bool from_cache = false;
};

struct CompileRequest {
  Variant variant;
  DType dtype = DType::kBF16;
  std::string arch;  // sm_90a
};

class CompilerService {
 public:
  // `cache` may be null (no caching); it must outlive the service.
  CompilerService(KernelCache* cache, unsigned threads);
  ~CompilerService();  // finishes queued compiles
  CompilerService(const CompilerService&) = delete;
  CompilerService& operator=(const CompilerService&) = delete;

  using Result = std::shared_ptr<const CompiledKernel>;
  // Starts (or joins) the compile of a request; every waiter gets the same
  // result. Throws nvrtc::NvrtcUnavailable (one line) when no NVRTC loads:
  // the cache keys carry the NVRTC version, so nothing could be served.
  std::shared_future<Result> compile(const CompileRequest& request);

  // Everything that makes a binary different (design brief: cache key).
  static CacheKey cache_key(const CompileRequest& request);

  struct Stats {
    std::uint64_t requests = 0;
    std::uint64_t compiles = 0;  // NVRTC runs
    std::uint64_t shared = 0;    // requests that joined a compile in flight or done
  };
  Stats stats() const;

 private:
  void worker();
  Result build(const CompileRequest& request, const CacheKey& key);

  KernelCache* cache_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::map<std::string, std::shared_future<Result>> known_;  // by cache-key digest
  Stats stats_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// The serialized form of a compiled kernel, as the cache stores it.
std::vector<char> serialize(const CompiledKernel& kernel);
CompiledKernel deserialize(std::span<const char> bytes);  // throws IoError when malformed

}  // namespace attune
