#include "core/device_checks.h"

#include <charconv>

#include "core/env.h"
#include "core/error.h"

namespace attune {

int wait_bound_ms() {
  const std::string text = env("ATTUNE_WAIT_BOUND_MS");
  if (text.empty()) return 0;
  int ms = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size() || ms < 0 || ms > 600000) {
    throw InvalidArgument("ATTUNE_WAIT_BOUND_MS: got '" + text + "'; expected a whole number of ms in 0..600000");
  }
  return ms;
}

std::vector<std::string> device_check_options() {
  const int ms = wait_bound_ms();
  if (ms == 0) return {};
  return {"-DATTUNE_WAIT_BOUND_MS=" + std::to_string(ms)};
}

}  // namespace attune
