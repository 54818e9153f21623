// What the emulator finds: typed bug reports with block and thread
// coordinates, the template line and the address or buffer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "templates/primitives/config.h"

namespace attune::emu {

enum class BugKind {
  kGlobalOutOfBounds,        // global access outside every registered buffer
  kSharedOutOfBounds,        // shared access beyond the dynamic size
  kSharedRace,               // two threads, same bytes, no barrier between, one writes
  kAsyncCopyReadBeforeWait,  // cp.async destination touched before its group was waited on
  kBarrierDivergence,        // a block barrier not reached by every thread
  kWarpDivergence,           // a warp collective not reached by every lane
  kKernelException,          // the kernel body threw
  // Hopper (templates/primitives/hopper.h):
  kWgmmaOperandInFlight,  // accumulator or register A written before the wait_group that covers it, or no wgmma.fence
  kWgmmaDivergence,       // a wgmma whose shape, flags or descriptors differ across its warpgroup, or a partial one
  kAsyncProxyOrder,       // shared bytes the async proxy reads, written without fence.proxy.async or while in flight
  kIllegalRegisterCount,  // setmaxnreg outside 24..256 or not a multiple of 8
  kMbarrierMisuse,        // use before init, double init, a wrong parity, an unobserved phase, bytes beyond expected
  kDeadlock,              // every thread waits (mbarriers, named barriers), with each barrier's state
  kTmaMisuse,             // a box misaligned or outside shared memory, a bad tensor map, a rank mismatch
  // Between blocks:
  kGlobalRace,  // two blocks of one launch write the same global bytes with no order between them
};

std::string_view to_string(BugKind kind);

struct BugReport {
  BugKind kind;
  Dim3 block;
  Dim3 thread;
  i32 warp = 0;
  i32 lane = 0;
  std::string site;    // file:line of the primitive call
  std::string detail;  // addresses, buffers, other threads
  std::string to_string() const;
};

// Thrown by a launch that found bugs; holds every report (up to a limit).
class KernelFault : public Error {
 public:
  explicit KernelFault(std::vector<BugReport> reports, std::size_t dropped);
  const std::vector<BugReport>& reports() const { return reports_; }
  bool has(BugKind kind) const;

 private:
  std::vector<BugReport> reports_;
};

}  // namespace attune::emu
