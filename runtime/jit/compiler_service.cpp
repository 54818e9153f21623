#include "runtime/jit/compiler_service.h"

#include <cstring>

#include "core/device_checks.h"
#include "core/error.h"
#include "runtime/jit/nvrtc_compiler.h"
#include "runtime/jit/nvrtc_library.h"

namespace attune {

namespace {

// The options compile_with_nvrtc passes, part of the cache key, with the
// device checks the environment asks for (core/device_checks.h).
constexpr const char* kCompileOptions = "--std=c++20 --ptxas-options=-v";

std::string compile_options() {
  std::string options = kCompileOptions;
  for (const std::string& option : device_check_options()) options += " " + option;
  return options;
}

// Appends `bytes` at `at` and returns the position after them.
char* put(char* at, const void* bytes, std::size_t size) {
  std::memcpy(at, bytes, size);
  return at + size;
}

template <typename T>
T take(std::span<const char>& in) {
  if (in.size() < sizeof(T)) throw IoError("compiled kernel: truncated record");
  T value;
  std::memcpy(&value, in.data(), sizeof(T));
  in = in.subspan(sizeof(T));
  return value;
}

}  // namespace

std::vector<char> serialize(const CompiledKernel& kernel) {
  // One allocation of the final size (also keeps GCC 12's -Wstringop-overflow
  // from misreading repeated vector inserts at -O3).
  const auto name_size = static_cast<std::uint32_t>(kernel.lowered_name.size());
  const std::int32_t usage[2] = {kernel.registers, kernel.spill_bytes};
  std::vector<char> out(sizeof(name_size) + name_size + sizeof(usage) + kernel.cubin.size());
  char* at = put(out.data(), &name_size, sizeof(name_size));
  at = put(at, kernel.lowered_name.data(), name_size);
  at = put(at, usage, sizeof(usage));
  put(at, kernel.cubin.data(), kernel.cubin.size());
  return out;
}

CompiledKernel deserialize(std::span<const char> in) {
  CompiledKernel kernel;
  const auto name_size = take<std::uint32_t>(in);
  if (in.size() < name_size) throw IoError("compiled kernel: truncated name");
  kernel.lowered_name.assign(in.data(), name_size);
  in = in.subspan(name_size);
  kernel.registers = take<std::int32_t>(in);
  kernel.spill_bytes = take<std::int32_t>(in);
  if (in.empty()) throw IoError("compiled kernel: no cubin");
  kernel.cubin.assign(in.begin(), in.end());
  kernel.ok = true;
  kernel.from_cache = true;
  return kernel;
}

CompilerService::CompilerService(KernelCache* cache, unsigned threads) : cache_(cache) {
  const unsigned count = threads > 0 ? threads : std::max(1U, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < count; ++i) workers_.emplace_back([this] { worker(); });
}

CompilerService::~CompilerService() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

CacheKey CompilerService::cache_key(const CompileRequest& r) {
  return CacheKey{.template_hash = std::string(r.variant.kernel->source_hash),
                  .variant_id = r.variant.id(),
                  .dtype = std::string(to_string(r.dtype)),
                  .arch = r.arch,
                  .nvrtc_version = nvrtc_version(),
                  .options = compile_options()};
}

void CompilerService::worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to do
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

CompilerService::Result CompilerService::build(const CompileRequest& r, const CacheKey& key) {
  if (cache_ != nullptr) {
    if (auto bytes = cache_->load(key)) {
      try {
        return std::make_shared<const CompiledKernel>(deserialize(*bytes));
      } catch (const IoError&) {
        // A record the cache verified but we cannot read: recompile over it.
      }
    }
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.compiles;
  }
  const CompileResult nvrtc = compile_with_nvrtc(r.variant.kernel->source, std::string(r.variant.kernel->name) + ".cu",
                                                 r.variant.name_expression(r.dtype), r.arch, device_check_options());
  CompiledKernel kernel{.ok = nvrtc.ok,
                        .log = nvrtc.log,
                        .lowered_name = nvrtc.lowered_name,
                        .cubin = nvrtc.cubin,
                        .registers = nvrtc.registers,
                        .spill_bytes = nvrtc.spill_bytes,
                        .compile_seconds = nvrtc.seconds};
  if (kernel.ok && cache_ != nullptr) {
    try {
      cache_->store(key, serialize(kernel));
    } catch (const Error& e) {
      // A cache that cannot be written costs a recompile later, not this result.
      kernel.log += "\nkernel cache: not stored: " + std::string(e.what());
    }
  }
  return std::make_shared<const CompiledKernel>(std::move(kernel));
}

std::shared_future<CompilerService::Result> CompilerService::compile(const CompileRequest& request) {
  // No NVRTC is the caller's error, in the caller's thread (one line), not a
  // failed compile remembered for this variant.
  nvrtc::library();
  const CacheKey key = cache_key(request);
  const std::string digest = key.digest();
  const std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.requests;
  if (auto it = known_.find(digest); it != known_.end()) {
    ++stats_.shared;
    return it->second;
  }
  auto task = std::make_shared<std::packaged_task<Result()>>([this, request, key] {
    try {
      return build(request, key);
    } catch (const std::exception& e) {
      // Whatever goes wrong reaches every waiter as a failed compile.
      auto failed = std::make_shared<CompiledKernel>();
      failed->log = e.what();
      return Result(std::move(failed));
    }
  });
  std::shared_future<Result> future = task->get_future().share();
  known_.emplace(digest, future);
  queue_.emplace_back([task] { (*task)(); });
  wake_.notify_one();
  return future;
}

CompilerService::Stats CompilerService::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace attune
