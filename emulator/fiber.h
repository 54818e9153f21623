// A fiber: one emulated GPU thread's own stack and execution context, switched
// cooperatively by the block scheduler.
#pragma once

#include <ucontext.h>

#include <cstddef>

namespace attune::emu {

class Fiber {
 public:
  // The stack is mapped with a guard page below it, so an overflow faults
  // instead of corrupting a neighbour.
  explicit Fiber(std::size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Prepares the fiber to run entry(arg) from the top of its stack; when
  // entry returns, control goes back to whoever last resumed the fiber.
  void reset(void (*entry)(void*), void* arg);
  // Runs the fiber until it yields or its entry returns.
  void resume();
  // Called from inside the fiber: back to the resumer.
  void yield();
  bool finished() const { return finished_; }

 private:
  static void trampoline(unsigned int high, unsigned int low);

  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  ucontext_t context_{};
  ucontext_t caller_{};
  void (*entry_)(void*) = nullptr;
  void* arg_ = nullptr;
  bool finished_ = true;
};

}  // namespace attune::emu
