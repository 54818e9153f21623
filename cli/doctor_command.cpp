#include "cli/doctor_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "generator/kernel_registry.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/kernel_cache.h"
#include "runtime/jit/nvrtc_library.h"
#include "tuning_db/tuning_db.h"

namespace attune::cli {

CLI::App* add_doctor_command(CLI::App& app) {
  return app.add_subcommand("doctor", "Print what the runtime finds: NVRTC, driver, devices, cache, database");
}

void run_doctor() {
  std::vector<std::string> missing;
  if (std::string nvrtc_missing; nvrtc::available(&nvrtc_missing)) {
    const nvrtc::Library& nvrtc = nvrtc::library();
    std::printf("nvrtc:           %s (%s)\n", nvrtc.version.c_str(), nvrtc.path.c_str());
  } else {
    std::printf("nvrtc:           none (%s)\n", nvrtc_missing.c_str());
    missing.push_back("NVRTC (to compile kernels)");
  }
  for (const KernelSpec& k : kernel_specs()) {
    std::printf("kernel:          %s (template %s)\n", std::string(k.name).c_str(),
                std::string(k.source_hash.substr(0, 16)).c_str());
  }
  std::string why;
  if (cuda::Driver::available(&why)) {
    cuda::Driver& driver = cuda::Driver::get();
    std::printf("driver:          CUDA %d.%d\n", driver.version() / 1000, (driver.version() % 1000) / 10);
    const std::vector<cuda::DeviceInfo> devices = driver.devices();
    if (devices.empty()) missing.push_back("a CUDA device (the driver sees none)");
    for (const cuda::DeviceInfo& d : devices) {
      std::printf("device %d:        %s, compute %d.%d (%s), %d SMs, %d KiB shared/block, %d MiB L2, %.1f GiB\n",
                  d.ordinal, d.name.c_str(), d.compute_major, d.compute_minor, d.arch().c_str(), d.sm_count,
                  d.max_shared_per_block_optin / 1024, d.l2_bytes / (1024 * 1024),
                  static_cast<double>(d.total_memory) / (1024.0 * 1024.0 * 1024.0));
    }
  } else {
    std::printf("driver:          none (%s)\n", why.c_str());
    missing.push_back("an NVIDIA GPU with its driver (libcuda.so.1)");
  }
  const std::filesystem::path cache_dir = KernelCache::default_directory();
  try {
    const KernelCache cache({.directory = cache_dir});
    std::printf("kernel cache:    %s (%zu entries, %.1f MiB)\n", cache_dir.c_str(), cache.disk_entries(),
                static_cast<double>(cache.disk_bytes()) / (1024.0 * 1024.0));
  } catch (const Error& e) {
    std::printf("kernel cache:    %s unusable: %s\n", cache_dir.c_str(), e.what());
    missing.push_back("a private kernel cache directory");
  }
  const std::filesystem::path db_path = tuning_db::TuningDb::default_path();
  if (!std::filesystem::exists(db_path)) {
    std::printf("tuning database: %s (not created yet: attune tune creates it; dispatch uses the heuristic)\n",
                db_path.c_str());
  } else {
    try {
      const tuning_db::TuningDb db = tuning_db::TuningDb::open(db_path);
      std::printf("tuning database: %s (schema %d, %zu tuned problem keys)\n", db_path.c_str(), db.schema_version(),
                  db.best_all().size());
    } catch (const Error& e) {
      std::printf("tuning database: %s unusable: %s\n", db_path.c_str(), e.what());
    }
  }
  std::printf("emulator:        available (--backend emu)\n");
  if (missing.empty()) {
    std::printf("gpu use:         ready\n");
  } else {
    std::string text;
    for (const std::string& m : missing) text += (text.empty() ? "" : "; ") + m;
    std::printf("gpu use:         missing %s\n", text.c_str());
  }
}

}  // namespace attune::cli
