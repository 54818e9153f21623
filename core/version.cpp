#include "core/version.h"

#include <algorithm>
#include <charconv>
#include <cstddef>

namespace attune {

const char* attune_version() { return ATTUNE_VERSION; }

std::optional<std::vector<long>> parse_version(std::string_view text) {
  std::vector<long> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = std::min(text.find('.', start), text.size());
    const std::string_view piece = text.substr(start, dot - start);
    long value = 0;
    const auto [end, error] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
    if (piece.empty() || error != std::errc() || end != piece.data() + piece.size() || value < 0) {
      return std::nullopt;
    }
    parts.push_back(value);
    if (dot == text.size()) return parts;
    start = dot + 1;
  }
}

bool version_less(const std::vector<long>& a, const std::vector<long>& b) {
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const long x = i < a.size() ? a[i] : 0;
    const long y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y;
  }
  return false;
}

}  // namespace attune
