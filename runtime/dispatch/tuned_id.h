// How a tuned choice is written in the tuning database: a variant id, and for
// split-KV decode the split count after it ("flash_decode/d128.bm16.bn64.wn4.st2.pk1/splits8"),
// since the split count is a launch choice, not a template parameter.
#pragma once

#include <string>
#include <string_view>

#include "generator/variants.h"

namespace attune {

struct TunedChoice {
  Variant variant;
  int splits = 0;  // decode only; 0 for kernels without splits
};

std::string tuned_id(const Variant& variant, int splits);

// Parses and validates (the variant against its template, the split count
// against its range); throws InvalidArgument saying what is wrong.
TunedChoice parse_tuned_id(std::string_view id);

}  // namespace attune
