// Typed errors: every failure attune reports derives from attune::Error.
#pragma once

#include <stdexcept>
#include <string>

namespace attune {

// Base of every exception attune throws. The message says what was wrong,
// the value seen and what was expected.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A caller passed a problem, tensor or flag that breaks the operator contract.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be read or written, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace attune
