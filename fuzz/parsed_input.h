// What a fuzz target whose input is a file makes of it: the value `parse`
// reads from the input as a file, or nothing where `parse` refused it with a
// message (an attune::Error: refusing is fine, crashing is not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "fuzz/fuzz_support.h"

namespace attune::fuzz {

template <class Parse>
auto parse_input_file(const std::uint8_t* data, std::size_t size, Parse parse)
    -> std::optional<std::invoke_result_t<Parse, std::filesystem::path>> {
  const MemoryFile input(data, size);
  try {
    return parse(input.path());
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace attune::fuzz
