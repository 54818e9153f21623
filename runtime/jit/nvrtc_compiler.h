// One NVRTC compilation of a kernel instantiation, with its log and the
// ptxas resource usage. A failed compile is a value carrying its log.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attune {

struct CompileResult {
  bool ok = false;
  std::string log;           // NVRTC and ptxas messages
  std::vector<char> cubin;   // empty when not ok
  std::string ptx;           // the PTX NVRTC generated (empty when not ok)
  std::string lowered_name;  // the mangled name of the instantiation
  int registers = -1;        // per thread, from ptxas
  int spill_bytes = 0;       // spill stores + spill loads
  int stack_bytes = 0;       // stack frame
  double seconds = 0;        // wall time of the compile
  bool spills() const { return spill_bytes > 0; }
};

// Compiles `source` for `arch` ("sm_80", "sm_90a", ...) and resolves
// `name_expression` (e.g. "attune::flash_fwd<64, 64, 64, 4, 1, 2, attune::Bf16>").
// `extra_options` go to NVRTC after attune's own (e.g. "-I<dir>" for a source
// that is not a bundle). A compile whose ptxas log has a silent slowdown
// (slow_ptxas_message) fails, the message quoted. Throws
// nvrtc::NvrtcUnavailable (one line naming where NVRTC was looked for) when
// no NVRTC loads; a failed compile is a value.
CompileResult compile_with_nvrtc(std::string_view source, std::string_view program_name,
                                 std::string_view name_expression, std::string_view arch,
                                 const std::vector<std::string>& extra_options = {});

// The first line of a ptxas log that reports a slowdown the kernel would
// otherwise carry silently: C7508 (setmaxnreg ignored), C7510, C7511 and
// C7515 (wgmma serialized). Empty when there is none.
std::string slow_ptxas_message(std::string_view log);

// "13.0", as the NVRTC library reports it; "none" when no NVRTC loads.
std::string nvrtc_version();

// Fills registers, spill_bytes and stack_bytes from a ptxas -v log.
void parse_ptxas_usage(std::string_view log, CompileResult& result);

}  // namespace attune
