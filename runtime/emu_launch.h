// What the emulator backends of every operation share (internal to runtime/):
// the limits a variant must fit on the emulator, and one launch of a
// variant's emulator instantiation.
#pragma once

#include <string>

#include "core/error.h"
#include "emulator/emulator.h"
#include "generator/variants.h"

namespace attune {

// The emulator runs any block that fits in host memory; these are the limits
// it checks variants against (256 KiB of shared memory per block).
inline const ArchLimits& emulator_limits() {
  static const ArchLimits kLimits{.name = "the emulator", .max_shared_bytes = 256 * 1024};
  return kLimits;
}

inline void launch_on_emulator(const Variant& variant, DType dtype, emu::Emulator& emulator, const LaunchConfig& config,
                               const void* params) {
  if (!variant.kernel->launch_on_emulator(dtype, variant.values, emulator, config, params)) {
    throw InvalidArgument("variant " + variant.id() + ": not instantiated for the emulator");
  }
}

}  // namespace attune
