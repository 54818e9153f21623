// NVRTC, loaded with dlopen on first use (like the driver), so libattune.so
// and the CLI load and run the emulator and the reference where no CUDA
// toolkit exists. Where it is looked for, in order:
//   1. $ATTUNE_NVRTC (a library file, or a directory holding libnvrtc.so*);
//   2. $CUDA_HOME/lib64, then /usr/local/cuda/lib64;
//   3. the NVRTC a `pip install torch` brings (site-packages/nvidia/cu*/lib,
//      site-packages/nvidia/cuda_nvrtc/lib), in the site directories of
//      $ATTUNE_PYTHON_SITE (':'-separated), of the Python running this
//      process (from the files it has mapped), and of `python3` on PATH;
//   4. the dynamic loader's search path (libnvrtc.so.13, .so.12, .so).
//
//   const attune::nvrtc::Library& nvrtc = attune::nvrtc::library();  // NvrtcUnavailable if none
//   std::printf("%s from %s\n", nvrtc.version.c_str(), nvrtc.path.c_str());
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"

namespace attune::nvrtc {

// No NVRTC could be loaded. The message is one line naming every place that
// was looked at and why each failed, and what to do.
class NvrtcUnavailable : public Error {
 public:
  using Error::Error;
};

// The NVRTC entry points attune uses (opaque types as in nvrtc.h: the
// program is a pointer, results are ints, NVRTC_SUCCESS is 0).
struct Library {
  std::string path;     // the file that was loaded
  std::string version;  // "13.0"
  int major = 0;
  int minor = 0;

  using Program = void*;
  int (*create_program)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*destroy_program)(Program*) = nullptr;
  int (*compile_program)(Program, int, const char* const*) = nullptr;
  int (*add_name_expression)(Program, const char*) = nullptr;
  int (*get_lowered_name)(Program, const char*, const char**) = nullptr;
  int (*get_program_log_size)(Program, std::size_t*) = nullptr;
  int (*get_program_log)(Program, char*) = nullptr;
  int (*get_ptx_size)(Program, std::size_t*) = nullptr;
  int (*get_ptx)(Program, char*) = nullptr;
  int (*get_cubin_size)(Program, std::size_t*) = nullptr;
  int (*get_cubin)(Program, char*) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
};

// The process's NVRTC, loaded once; throws NvrtcUnavailable. A failed search
// is not remembered, so a later call looks again.
const Library& library();

// True when NVRTC loads; `why` gets the one-line reason otherwise. Never throws.
bool available(std::string* why = nullptr);

// The candidate files in the order library() tries them (after the ones
// named by $ATTUNE_NVRTC), each with the step it comes from. For `attune
// doctor` and tests.
struct Candidate {
  std::string source;  // "ATTUNE_NVRTC", "CUDA_HOME", "/usr/local/cuda", "python site-packages", "system search path"
  std::string path;    // a file, or a bare soname for the loader's search
};
std::vector<Candidate> candidates();

// Site directories of Python installations that may hold pip's NVRTC (step 3).
std::vector<std::string> python_site_directories();

}  // namespace attune::nvrtc
