// Writes the generated C++ that compiles the kernel templates into the
// library: the registry (sources, hashes, tunable spaces) and the emulator
// instantiations, spread over a fixed number of shard files.
#pragma once

#include <string>
#include <vector>

#include "generator/kernel_info.h"

namespace attune::gen {

struct BundledKernel {
  KernelInfo info;
  std::string source;  // bundled
  std::string hash;
};

// Writes registry.cpp and emu_shard_<k>.cpp (k < shards) into `out_dir`.
void emit_sources(const std::vector<BundledKernel>& kernels, const std::string& out_dir, int shards);

}  // namespace attune::gen
