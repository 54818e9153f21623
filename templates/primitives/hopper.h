// Hopper's primitives (sm_90a), one API over two implementations as in
// primitives.h: hopper_cuda.h (inline PTX; its header lists the API) and
// hopper_emulated.h (the emulator's twins). Only Hopper templates include it.
// The emulator models wgmma, fence.proxy.async and setmaxnreg so far; TMA,
// mbarriers, named barriers and elect.sync exist on CUDA only (docs/emulator.md).
#pragma once

#include "templates/primitives/hopper_layout.h"
#include "templates/primitives/primitives.h"

#if defined(ATTUNE_CUDA)
#include "templates/primitives/hopper_cuda.h"
#else
#include "templates/primitives/hopper_emulated.h"
#endif
