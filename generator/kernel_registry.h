// The kernel templates as compiled into the library by attune-gen: bundled
// source and its hash, the tunable space, and the emulator entry points.
#pragma once

#include <span>
#include <string_view>

#include "core/dtype.h"
#include "emulator/emulator.h"
#include "generated/kernel_ids.h"

namespace attune {

struct TunableSpec {
  std::string_view name;    // template parameter, e.g. kBlockM
  std::string_view id_key;  // variant-id key, e.g. bm
  std::span<const int> values;
};

struct KernelSpec {
  KernelId id;                      // KernelId::kFlashFwd
  std::string_view name;            // flash_fwd
  std::string_view qualified_name;  // attune::flash_fwd
  std::string_view params_type;     // attune::FlashFwdParams
  std::string_view source;          // the template with its includes, for NVRTC
  std::string_view source_hash;     // SHA-256 of `source`
  std::span<const TunableSpec> tunables;
  // Id keys of its features (template parameters after the dtype): the
  // score modifiers it supports, named as modifier_names does (softcap,
  // sinks, alibi).
  std::span<const std::string_view> features;
  // The only architectures it compiles for (sm_90a); empty: every one.
  std::span<const std::string_view> archs;
  bool (*valid)(std::span<const int> values);        // the template's own constraints
  int (*threads)(std::span<const int> values);       // threads per block
  int (*shared_bytes)(std::span<const int> values);  // dynamic shared memory
  // Launches the instantiation on the emulator with `params` (a pointer to
  // the params type); false when the values name no valid instantiation.
  bool (*launch_on_emulator)(DType dtype, std::span<const int> values, emu::Emulator& emulator,
                             const LaunchConfig& config, const void* params);
};

// Every kernel attune-gen found in templates/ (generated).
std::span<const KernelSpec> kernel_specs();

// The kernel of that name, or null.
const KernelSpec* find_kernel_spec(std::string_view name);
// The kernel of that id (every id has one).
const KernelSpec& kernel_spec(KernelId id);

}  // namespace attune
