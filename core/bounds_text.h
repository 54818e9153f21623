// One line for a BoundsReport (templates/primitives/bounds_report.h), the
// same whether a GPU kernel or the emulator wrote it.
#pragma once

#include <string>

#include "templates/primitives/bounds_report.h"

namespace attune {

// "" when the report is not complete (magic unset).
std::string describe_bounds_report(const BoundsReport& report);

}  // namespace attune
