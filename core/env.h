// Environment variables as attune reads them: unset and empty are the same.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace attune {

// The value of `name`, or "" when it is unset.
inline std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// A whole number in [low, high] from `name`, or `unset` when it is unset;
// anything else is InvalidArgument "NAME: got 'TEXT'; expected EXPECTED".
inline std::uint64_t env_integer(const char* name, std::uint64_t low, std::uint64_t high, std::uint64_t unset,
                                 const std::string& expected) {
  const std::string text = env(name);
  if (text.empty()) return unset;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    throw InvalidArgument(std::string(name) + ": got '" + text + "'; expected " + expected);
  }
  return value;
}

}  // namespace attune
