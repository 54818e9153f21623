// What attune-gen learns about a kernel template: its entry point, its
// tunables with their value lists, and its params type.
#pragma once

#include <cctype>
#include <string>
#include <vector>

namespace attune::gen {

// flash_fwd -> FlashFwd: the type-name form of a kernel name.
inline std::string camel_case(const std::string& snake) {
  std::string out;
  bool upper = true;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

// kSoftcap -> softcap: a feature's variant-id key.
inline std::string feature_key(const std::string& param) {
  std::string out = param.size() > 1 && param[0] == 'k' ? param.substr(1) : param;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct TunableInfo {
  std::string name;    // template parameter name, e.g. kBlockM
  std::string id_key;  // variant-id key, e.g. bm
  std::vector<int> values;
};

// A field of a kernel's params struct that carries a tunable of another
// kernel (ATTUNE_TUNABLE_OF in the template): filled from that kernel's
// typed shape by generated code, never by hand.
struct TunableField {
  std::string field;    // partial_keys
  std::string kernel;   // flash_bwd
  std::string tunable;  // kBlockN
  std::string where;    // templates/flash_bwd.cuh:87
};

struct KernelInfo {
  std::string name;                   // flash_fwd
  std::string qualified_name;         // attune::flash_fwd
  std::string tunables_struct;        // attune::FlashFwdTunables
  std::string params_type;            // attune::FlashFwdParams
  std::string header;                 // root-relative path of the template, e.g. templates/flash_fwd.cuh
  std::vector<TunableInfo> tunables;  // the int template parameters before DType, in order
  // The int template parameters after DType, by id key (softcap, sinks,
  // alibi): score modifiers the problem turns on (1) or off (0), never
  // tuned; the emulator instantiates them once at -1, read from the params.
  std::vector<std::string> features;
  std::vector<TunableField> tunable_fields;  // of params_type
  // The only architectures it compiles for (Tunables::kArchs, e.g. sm_90a
  // for wgmma and TMA); empty: every architecture.
  std::vector<std::string> archs;
  // Tunables the emulator's instantiation reads from the params (instantiated
  // once, at kAtRunTime: Tunables::kEmulatedAtRunTime).
  std::vector<std::string> emulated_at_run_time;
};

}  // namespace attune::gen
