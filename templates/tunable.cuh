// A tunable as a kernel reads it. A variant compiled for the GPU fixes every
// tunable as a template constant; the emulator instantiates a kernel once
// per shape with kAtRunTime (-1) for the tunables its tunables struct lists
// in kEmulatedAtRunTime, and carries their values in the params. Tunable<k>
// holds both lives behind one accessor, so a kernel reads `t.value()`
// whichever it is compiled as, and a fixed one costs nothing.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

inline constexpr int kAtRunTime = -1;

template <int kValue>
class Tunable {
 public:
  // `at_run_time`: the params' field, read only in the kAtRunTime instance.
  ATTUNE_HOST_DEVICE constexpr explicit Tunable(i32 at_run_time) : at_run_time_(at_run_time) {}
  ATTUNE_HOST_DEVICE constexpr i32 value() const {
    if constexpr (kValue == kAtRunTime) {
      return at_run_time_;
    } else {
      return kValue;
    }
  }
  ATTUNE_HOST_DEVICE constexpr bool on() const { return value() != 0; }

 private:
  i32 at_run_time_;
};

// Whether every one of these tunables is a compile-time constant (a GPU
// variant, whose validity a static_assert can check).
template <int... kValues>
inline constexpr bool kAllFixed = ((kValues != kAtRunTime) && ...);

}  // namespace attune
