// The emulator backend of the attention operations: runs a variant of the
// forward or decode kernels on the CPU over host buffers.
#pragma once

#include "core/problem.h"
#include "generator/variants.h"

namespace attune {

// Computes O (and LSE when buffers.lse is set) for a validated problem whose
// Q, K, V and O are 16-bit storage in host memory. Every access the kernel
// makes is checked: throws emu::KernelFault when the emulator finds a bug,
// InvalidArgument when the variant cannot run the problem.
void emulate_forward(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant);

// The split-KV decode on the emulator: a flash_decode variant over `splits`
// CTAs per row block, then flash_decode_combine when splits > 1. Contiguous
// or paged caches; the same checks as emulate_forward.
void emulate_decode(const AttentionProblem& problem, const AttentionBuffers& buffers, const Variant& variant,
                    int splits);

}  // namespace attune
