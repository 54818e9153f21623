// The emulator's side of templates/primitives/bounds_report.h: kernels that
// clamp a length or a page index they read report it here (the hook
// emu::hooks::report_bounds), as CUDA kernels report through host-mapped
// memory, with the same rule: the first event of each generation is kept.
//
//   const std::string text = attune::emu::bounds_report();   // "" when none
//   attune::emu::clear_bounds_report();                      // a new generation
#pragma once

#include <string>

#include "templates/primitives/bounds_report.h"

namespace attune::emu {

// The report of this process's emulated kernels (magic 0: none).
BoundsReport bounds_report_record();
// One line for it ("" when none).
std::string bounds_report();
void clear_bounds_report();

}  // namespace attune::emu
