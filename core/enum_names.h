// The names of an enum's values in one table per enum: to_string and the
// parse functions read the same table, so a value is named in one place.
//
//   constexpr NamedValue<Op> kOpNames[] = {{Op::kForward, "fwd"}, {Op::kDecode, "decode"}};
//   std::string_view to_string(Op op) { return name_of(kOpNames, op); }
//   std::optional<Op> parse_op(std::string_view s) { return value_of(kOpNames, s); }
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace attune {

template <class E>
struct NamedValue {
  E value;
  std::string_view name;
};

template <class E, std::size_t N>
constexpr std::string_view name_of(const NamedValue<E> (&table)[N], E value, std::string_view unknown = "?") {
  for (const NamedValue<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

template <class E, std::size_t N>
constexpr std::optional<E> value_of(const NamedValue<E> (&table)[N], std::string_view name) {
  for (const NamedValue<E>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

}  // namespace attune
