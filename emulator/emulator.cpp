// The emulator's public face (emulator/emulator.h): options, registered
// buffers, counters and launches; the machine behind it is emulator/machine.h.
#include "emulator/emulator.h"

#include "emulator/machine.h"

namespace attune::emu {

Emulator::Emulator() : Emulator(Options{}) {}

Emulator::Emulator(Options options) : impl_(std::make_unique<Impl>()) { impl_->options = options; }

Emulator::~Emulator() = default;

void Emulator::register_buffer(std::string name, const void* data, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  impl_->buffers.insert_or_assign(
      begin, Buffer{begin, begin + bytes, std::move(name), GlobalWrites(bytes), GlobalReductions(bytes)});
}

const LaunchCounters& Emulator::counters() const { return impl_->counters; }

void Emulator::unregister_buffer(const void* data) { impl_->buffers.erase(reinterpret_cast<std::uintptr_t>(data)); }

void Emulator::launch(const LaunchConfig& config, const std::function<void()>& thread_body) {
  impl_->launch(config, thread_body);
}

}  // namespace attune::emu
