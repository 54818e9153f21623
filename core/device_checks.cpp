#include "core/device_checks.h"

#include "core/env.h"
#include "core/error.h"

namespace attune {

int wait_bound_ms() {
  return static_cast<int>(env_integer("ATTUNE_WAIT_BOUND_MS", 0, 600000, 0, "a whole number of ms in 0..600000"));
}

std::vector<std::string> device_check_options() {
  const int ms = wait_bound_ms();
  if (ms == 0) return {};
  return {"-DATTUNE_WAIT_BOUND_MS=" + std::to_string(ms)};
}

}  // namespace attune
