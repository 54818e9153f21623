// The SASS of a cubin, as nvdisasm prints it, counted by instruction: what a
// variant really compiles to.
//
//   const SassMix mix = sass_mix(cubin);   // {"HMMA": 256, "LDSM": 96, "MUFU.EX2": 64, ...}
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace attune::profile {

// Instructions by opcode (the mnemonic before its first '.'), and
// "MUFU.EX2" for the exponentials among the MUFU, "MUFU.TANH" for the
// softcap's tanh.
using SassMix = std::map<std::string, int>;

// nvdisasm: $ATTUNE_NVDISASM, then PATH, $CUDA_HOME/bin, /usr/local/cuda/bin,
// the copy tools/setup.sh unpacks from NVIDIA's PyPI wheel
// ($XDG_CACHE_HOME or ~/.cache)/attune/tools/bin, then pip's
// site-packages/nvidia/*/bin of python3's site directories. Empty when none.
std::string find_nvdisasm();

// Disassembles `cubin` with nvdisasm; throws Error (naming where nvdisasm was
// looked for) when there is none, IoError when it fails.
std::string disassemble(const std::vector<char>& cubin);

// Counts the instructions of nvdisasm's text.
SassMix count_sass(std::string_view sass);

}  // namespace attune::profile
