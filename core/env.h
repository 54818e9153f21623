// Environment variables as attune reads them: unset and empty are the same.
#pragma once

#include <cstdlib>
#include <string>

namespace attune {

// The value of `name`, or "" when it is unset.
inline std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace attune
