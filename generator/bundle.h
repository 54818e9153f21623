// One self-contained source string per kernel template: the template with
// every project include inlined once, so NVRTC needs no files on disk.
#pragma once

#include <string>

namespace attune::gen {

// Inlines `#include "X"` lines that resolve under `root` (each file once,
// `#pragma once` dropped) and marks each file with #line so that compiler
// messages point at the original file and line. Throws std::runtime_error
// for an unreadable file.
std::string bundle_source(const std::string& path, const std::string& root);

// SHA-256 of the text, as 64 lowercase hex digits.
std::string content_hash(const std::string& text);

}  // namespace attune::gen
