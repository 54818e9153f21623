#include "generator/kernel_registry.h"

#include <algorithm>

namespace attune {

const KernelSpec* find_kernel_spec(std::string_view name) {
  const auto specs = kernel_specs();
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const KernelSpec& k) { return k.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

const KernelSpec& kernel_spec(KernelId id) {
  const auto specs = kernel_specs();
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const KernelSpec& k) { return k.id == id; });
  return *it;  // attune-gen emits a spec for every id
}

}  // namespace attune
