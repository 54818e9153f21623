// Checks compiled into device code on request, for runs on a GPU nothing has
// run on yet (tools/gpu_check): read from the environment, so every kernel
// the process compiles and loads agrees on them.
//
//   ATTUNE_WAIT_BOUND_MS=N   mbarrier waits give up after N ms, write a
//                            WaitReport (templates/primitives/wait_report.h)
//                            and trap; the compile option is part of each
//                            binary's cache key. Unset, empty or 0: off.
#pragma once

#include <string>
#include <vector>

namespace attune {

// The wait bound in ms (0: off). Throws InvalidArgument for a value that is
// not a whole number in 0..600000.
int wait_bound_ms();

// The NVRTC options the checks above add ({} when all are off).
std::vector<std::string> device_check_options();

}  // namespace attune
