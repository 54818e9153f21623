// The message of the exception an action throws, for tests that check what
// an error says: "(no error)" when it throws none (so the comparison fails).
#pragma once

#include <string>

#include "core/error.h"

namespace attune::testing {

template <class E = Error, class Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace attune::testing
