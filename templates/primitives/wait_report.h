// What a bounded mbarrier wait leaves for the host when it gives up.
//
// Kernels compiled with -DATTUNE_WAIT_BOUND_MS=N (the runtime adds it when
// $ATTUNE_WAIT_BOUND_MS is set) stop waiting on an mbarrier after N ms: the
// first thread to give up writes one WaitReport into host-mapped memory (the
// module global `attune_wait_report` points at it; the cuda backend sets it
// when it looks a kernel up), makes it visible to the host, and traps (the
// others keep waiting, so no other trap cuts its stores short). The
// host reads the report after the launch has failed, so a wrong parity or a
// lost arrival costs one bounded launch and names its barrier, instead of a
// GPU that never answers. Plain data, shared by the kernel and the host.
#pragma once

#include "templates/primitives/config.h"

namespace attune {

struct WaitReport {
  u32 magic;      // kWaitReportMagic once the report is complete
  u32 claimed;    // 1 once a thread has taken the slot (the first one wins)
  u32 block[3];   // blockIdx
  u32 thread;     // linear thread index in the block (warp = thread / 32)
  u32 barrier;    // the barrier's shared-memory address
  u32 parity;     // the phase parity the thread waited for
  u64 state;      // the barrier's 64-bit word when the wait gave up
  u64 waited_ns;  // %globaltimer time spent waiting
  u32 bound_ms;   // the bound it was compiled with
  u32 reserved;
};

inline constexpr u32 kWaitReportMagic = 0x54494157U;  // "WAIT" in memory order

}  // namespace attune
