// The emulator backend of backward attention: runs flash_bwd_preprocess, a
// flash_bwd variant and flash_bwd_dq_convert on the CPU over host buffers.
#pragma once

#include "core/problem.h"
#include "generator/variants.h"

namespace attune {

// Computes dQ, dK and dV for a validated problem whose tensors are 16-bit
// storage in host memory (O and LSE as the forward wrote them). The fp32
// workspaces are allocated here and start as NaN, so a kernel that reads a
// slot nobody wrote shows it in its output. Every access the kernels make is
// checked: throws emu::KernelFault when the emulator finds a bug,
// InvalidArgument when the variant cannot run the problem.
//
//   emulate_backward(problem, {q, k, v, o, d_o, lse, dq, dk, dv},
//                    parse_variant_id("flash_bwd/d64.bm64.bn64.wm2.wn4.st2.at0"));
void emulate_backward(const AttentionProblem& problem, const BackwardBuffers& buffers, const Variant& variant);

}  // namespace attune
