// The tensor maps of a backend, by their inputs: a call that repeats the
// last ones (the same tensors, strides and boxes) reuses the encoded maps
// instead of asking the driver again (cuTensorMapEncodeTiled is a host call
// of a few microseconds, paid per map per call otherwise).
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/tensor_map.h"

namespace attune {

class TensorMapCache {
 public:
  // Bounded: past this many maps the cache starts over (a serving loop
  // reuses a handful; a sweep over many shapes must not grow without end).
  static constexpr std::size_t kCapacity = 1024;

  // The map of `spec`, encoded by `encode` on first sight.
  TensorMap get(const TensorMapSpec& spec, const std::function<TensorMap(const TensorMapSpec&)>& encode) {
    const std::string key = key_of(spec);
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
  static std::string key_of(const TensorMapSpec& s) {
    std::string key(sizeof(s.address) + sizeof(s.dims) + sizeof(s.strides) + sizeof(s.box) + sizeof(s.element_strides) +
                        3 * sizeof(int),
                    '\0');
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
  std::unordered_map<std::string, TensorMap> maps_;
  std::size_t encodes_ = 0;
};

}  // namespace attune
