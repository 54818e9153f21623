// The tensor maps of a backend, by their inputs: a call that repeats the
// last ones (the same tensors, strides and boxes) reuses the encoded maps
// instead of asking the driver again (cuTensorMapEncodeTiled is a host call
// of a few microseconds, paid per map per call otherwise).
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "core/tensor_map.h"

namespace attune {

class TensorMapCache {
 public:
  // Bounded: past this many maps the cache starts over (a serving loop
  // reuses a handful; a sweep over many shapes must not grow without end).
  static constexpr std::size_t kCapacity = 1024;

  // The map of `spec`, encoded by `encode` on first sight. A hit allocates
  // nothing: the key is the spec's fields in a fixed array.
  TensorMap get(const TensorMapSpec& spec, const std::function<TensorMap(const TensorMapSpec&)>& encode) {
    const Key key = key_of(spec);
    std::lock_guard lock(mutex_);
    if (auto it = maps_.find(key); it != maps_.end()) return it->second;
    TensorMap map = encode(spec);  // throws before anything is stored
    if (maps_.size() >= kCapacity) maps_.clear();
    maps_.emplace(key, map);
    ++encodes_;
    return map;
  }

  // How many maps were encoded (tests: a repeated call adds none).
  std::size_t encodes() const {
    std::lock_guard lock(mutex_);
    return encodes_;
  }

 private:
  static constexpr std::size_t kKeyBytes = sizeof(TensorMapSpec::address) + sizeof(TensorMapSpec::dims) +
                                           sizeof(TensorMapSpec::strides) + sizeof(TensorMapSpec::box) +
                                           sizeof(TensorMapSpec::element_strides) + 3 * sizeof(int);
  using Key = std::array<char, kKeyBytes>;
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::string_view>{}({k.data(), k.size()}); }
  };

  static Key key_of(const TensorMapSpec& s) {
    Key key{};
    char* at = key.data();
    const auto put = [&](const void* data, std::size_t bytes) {
      std::memcpy(at, data, bytes);
      at += bytes;
    };
    put(static_cast<const void*>(&s.address), sizeof(s.address));
    put(s.dims.data(), sizeof(s.dims));
    put(s.strides.data(), sizeof(s.strides));
    put(s.box.data(), sizeof(s.box));
    put(s.element_strides.data(), sizeof(s.element_strides));
    const int small[] = {s.rank, s.element_bytes, static_cast<int>(s.swizzle)};
    put(small, sizeof(small));
    return key;
  }

  mutable std::mutex mutex_;
  std::unordered_map<Key, TensorMap, KeyHash> maps_;
  std::size_t encodes_ = 0;
};

}  // namespace attune
