// attune's own version (the CMake project version) and the ordering of
// version strings, used to tell old measurements from current ones.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace attune {

// "MAJOR.MINOR.PATCH" of this build.
const char* attune_version();

// The numeric components of a dotted version ("0.10.2" -> {0, 10, 2});
// nullopt when `text` is not one or more dot-separated decimal numbers.
std::optional<std::vector<long>> parse_version(std::string_view text);

// Whether version `a` comes before `b`, component by component, a missing
// component counting as 0 ("1.2" == "1.2.0"). Both must parse.
bool version_less(const std::vector<long>& a, const std::vector<long>& b);

}  // namespace attune
