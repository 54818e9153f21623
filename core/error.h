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

// Runs `fn`: true when it returns, false with the message in *why (when
// `why` is not null) when it throws an attune::Error. For the available()
// questions of optional parts (driver, NVRTC).
template <class Fn>
bool succeeds(const Fn& fn, std::string* why) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

}  // namespace attune
