#include "emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"

namespace attune::emu {

Fiber::Fiber(std::size_t stack_bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t stack = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack + page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    throw Error("emulator: cannot map a fiber stack of " + std::to_string(mapping_bytes_) +
                " bytes: " + std::strerror(errno));
  }
  mprotect(mapping_, page, PROT_NONE);  // guard page at the low end
  context_.uc_stack.ss_sp = static_cast<char*>(mapping_) + page;
  context_.uc_stack.ss_size = stack;
}

Fiber::~Fiber() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

void Fiber::trampoline(unsigned int high, unsigned int low) {
  // makecontext passes int arguments only: the pointer arrives in two halves.
  auto* self =
      reinterpret_cast<Fiber*>((static_cast<std::uintptr_t>(high) << 32) | low);  // NOLINT(performance-no-int-to-ptr)
  self->entry_(self->arg_);
  self->finished_ = true;
  // Returning ends the context; uc_link brings control back to the caller.
}

void Fiber::reset(void (*entry)(void*), void* arg) {
  void* stack = context_.uc_stack.ss_sp;
  const std::size_t size = context_.uc_stack.ss_size;
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack;
  context_.uc_stack.ss_size = size;
  context_.uc_link = &caller_;
  entry_ = entry;
  arg_ = arg;
  finished_ = false;
  const auto self = reinterpret_cast<std::uintptr_t>(this);
  makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, static_cast<unsigned int>(self >> 32),
              static_cast<unsigned int>(self & 0xFFFFFFFFU));
}

void Fiber::resume() { swapcontext(&caller_, &context_); }

void Fiber::yield() { swapcontext(&context_, &caller_); }

}  // namespace attune::emu
