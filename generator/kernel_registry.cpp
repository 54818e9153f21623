#include "generator/kernel_registry.h"

#include <algorithm>

namespace attune {

const KernelSpec* find_kernel_spec(std::string_view name) {
  const auto specs = kernel_specs();
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const KernelSpec& k) { return k.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

}  // namespace attune
