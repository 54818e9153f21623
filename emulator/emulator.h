// The SIMT emulator: runs a kernel template's body for every thread of a
// grid on the CPU. Blocks run one after another (a block waiting on a global
// semaphore is set aside while others run); inside a block every thread is a
// fiber, and barriers and warp collectives rendezvous. Every memory
// access goes through a check, and what it finds is thrown as KernelFault.
//
// Example:
//   attune::emu::Emulator emu;
//   emu.register_buffer("out", out.data(), out.size() * sizeof(float));
//   emu.launch(&my_kernel, {.grid = {4, 1, 1}, .block = {128, 1, 1}}, params);
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "emulator/counters.h"
#include "emulator/launch.h"
#include "emulator/report.h"

namespace attune::emu {

class Emulator {
 public:
  struct Options {
    std::size_t stack_bytes = std::size_t{256} * 1024;  // per emulated thread
    std::size_t max_reports = 32;                       // kept in a KernelFault; the rest are counted
    // 0: blocks run in grid order and each block's threads are swept by
    // index. Otherwise blocks run in an order drawn from the seed (and the
    // launch), and each block's threads are swept in one: a result that
    // depends on the order (fp32 atomics, a missing wait) changes with it.
    std::uint64_t schedule_seed = 0;
    // Blocks (clusters) resident at once: a block whose threads wait on a
    // global semaphore (dev::semaphore_wait) is set aside while others run,
    // as on a GPU; a launch that needs more of them at once is a hang.
    std::size_t max_resident_units = 32;
  };

  Emulator();
  explicit Emulator(Options options);
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // Global memory the kernel may touch; any other address is out of bounds.
  void register_buffer(std::string name, const void* data, std::size_t bytes);
  void unregister_buffer(const void* data);

  // Runs `thread_body` once per thread of the grid. Throws KernelFault when
  // a check failed (after the whole grid ran, or at once for a hang or a
  // kernel exception), InvalidArgument for a bad configuration.
  void launch(const LaunchConfig& config, const std::function<void()>& thread_body);

  // Launches a kernel entry point (an ATTUNE_KERNEL function) with its params.
  template <class Params>
  void launch(void (*kernel)(Params), const LaunchConfig& config, const Params& params) {
    launch(config, [&] { kernel(params); });
  }

  // What the launches of this emulator did (summed over launches): warp
  // instructions, shared wavefronts by the bank model, exponentials,
  // barriers, global bytes (emulator/counters.h).
  const LaunchCounters& counters() const;

  struct Impl;  // public so that the primitives' hooks can reach the running launch

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attune::emu
