// One call on the GPU from host arrays, start to end: each array gets a
// device buffer of its own (copied in, or only allocated), the call runs on
// those pointers, and the arrays that are results are copied back once the
// stream is done. The CLI, the tuner's checks and the GPU tests run single
// calls this way.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "runtime/cuda/cuda_driver.h"

namespace attune::cuda {

struct HostArray {
  const void* to_device;  // copied into the buffer first; null: allocated only
  void* from_device;      // the buffer copied here after the call; null: not copied back
  std::size_t bytes;
};

// An input, a result, and a result whose buffer starts as the host's
// contents (a NaN fill that a kernel must overwrite, an accumulator).
template <class Container>
HostArray in(const Container& c) {
  return {c.data(), nullptr, c.size() * sizeof(*c.data())};
}
template <class Container>
HostArray out(Container& c) {
  return {nullptr, c.data(), c.size() * sizeof(*c.data())};
}
template <class Container>
HostArray inout(Container& c) {
  return {c.data(), c.data(), c.size() * sizeof(*c.data())};
}

// call(device pointers, in the order of `arrays`; null for an empty one) on
// `stream`.
void run_on_device(Driver& driver, void* stream, const std::vector<HostArray>& arrays,
                   const std::function<void(const std::vector<void*>&)>& call);

}  // namespace attune::cuda
