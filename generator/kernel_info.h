// What attune-gen learns about a kernel template: its entry point, its
// tunables with their value lists, and its params type.
#pragma once

#include <string>
#include <vector>

namespace attune::gen {

struct TunableInfo {
  std::string name;    // template parameter name, e.g. kBlockM
  std::string id_key;  // variant-id key, e.g. bm
  std::vector<int> values;
};

struct KernelInfo {
  std::string name;                   // flash_fwd
  std::string qualified_name;         // attune::flash_fwd
  std::string tunables_struct;        // attune::FlashFwdTunables
  std::string params_type;            // attune::FlashFwdParams
  std::string header;                 // root-relative path of the template, e.g. templates/flash_fwd.cuh
  std::vector<TunableInfo> tunables;  // the int template parameters, in order
};

}  // namespace attune::gen
