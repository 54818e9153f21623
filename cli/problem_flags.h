// Flag parsing shared by the commands that describe a problem.
#pragma once

#include <string>

#include "core/problem.h"

namespace attune::cli {

// Throws InvalidArgument "FLAG: got 'SEEN'; expected EXPECTED".
[[noreturn]] void bad_flag(const std::string& flag, const std::string& seen, const std::string& expected);

DType parse_dtype_flag(const std::string& text);

// --causal (bottom-right | top-left | empty) and --window (LEFT,RIGHT |
// empty) together make one mask of the contract: a window is bottom-right
// aligned, bottom-right causal caps its right side at 0, and a window with
// top-left causal is rejected.
Mask parse_mask(const std::string& causal, const std::string& window);

}  // namespace attune::cli
