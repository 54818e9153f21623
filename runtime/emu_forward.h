// The emulator backend of the forward operation: runs a variant of the
// forward kernel on the CPU over host buffers.
#pragma once

#include "core/problem.h"
#include "generator/variants.h"

namespace attune {

// Computes O (and LSE when buffers.lse is set) for a validated problem whose
// Q, K, V and O are 16-bit storage in host memory. Every access the kernel
// makes is checked: throws emu::KernelFault when the emulator finds a bug,
// InvalidArgument when the variant cannot run the problem.
void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant);

}  // namespace attune
