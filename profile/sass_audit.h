// Where a kernel's registers and instructions go, read from its SASS (as
// nvdisasm prints it): per region between setmaxnreg instructions
// (USETMAXREG) the highest register named and the local-memory spills, since
// ptxas compiles the code after `setmaxnreg.inc` for the raised budget while
// `ptxas -v` prints only the entry's; per loop that issues tensor-core MMAs
// (HGMMA, QGMMA or HMMA) its length per MMA and the instruction classes an
// attention step spends.
//
//   const SassAudit audit = audit_sass(disassemble(cubin));
//   audit.regions[1].highest_register;   // e.g. 199 after USETMAXREG 240
//   audit.loops[0].instructions_per_mma;  // e.g. 70.8
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attune::profile {

struct SassRegion {
  std::string function;       // the mangled name of the function it is in
  int first_address = 0;      // its first instruction's
  int register_limit = 0;     // the USETMAXREG count that opens it; 0: the launch's own budget
  int highest_register = -1;  // the highest R<n> named in it; -1 when none
  int instructions = 0;
  int spill_stores = 0;  // STL
  int spill_loads = 0;   // LDL
};

// A natural loop: for a branch back to a block that dominates it (the
// header), the blocks that reach the branch without passing the header.
// Several back edges to one header make one loop.
struct SassLoop {
  std::string function;
  int begin_address = 0;  // the header's
  int end_address = 0;    // the highest address in the loop
  int instructions = 0;
  int mma = 0;                            // HGMMA, QGMMA and HMMA
  int inner_mma_loops = 0;                // MMA loops inside this one (0: innermost; a persistent tile loop holds some)
  std::map<std::string, int> mma_shapes;  // "HGMMA.64x128x16.F32.BF16": count
  double instructions_per_mma = 0;
  // MUFU.EX2, FMNMX, FSETP, FSEL, FFMA, FMUL, FADD, ISETP.EX (64-bit
  // compares), SHFL, BAR (BAR, SYNCS: block and mbarrier syncs), STL, LDL.
  std::map<std::string, int> classes;
};

struct SassAudit {
  std::vector<SassRegion> regions;  // in address order, per function
  std::vector<SassLoop> loops;      // those with an MMA, by begin address
};

SassAudit audit_sass(std::string_view sass);

}  // namespace attune::profile
