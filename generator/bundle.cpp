#include "generator/bundle.h"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/Support/SHA256.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace attune::gen {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void inline_file(const std::filesystem::path& root, const std::string& relative, std::set<std::string>& seen,
                 std::string& out) {
  if (!seen.insert(relative).second) return;
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\"\s*$)");
  static const std::regex kPragmaOnce(R"(^\s*#\s*pragma\s+once\s*$)");
  std::istringstream lines(read_file(root / relative));
  std::string line;
  int number = 0;
  out += "#line 1 \"" + relative + "\"\n";
  while (std::getline(lines, line)) {
    ++number;
    std::smatch match;
    if (std::regex_match(line, match, kInclude) && std::filesystem::exists(root / match[1].str())) {
      inline_file(root, match[1].str(), seen, out);
      out += "#line " + std::to_string(number + 1) + " \"" + relative + "\"\n";
      continue;
    }
    if (std::regex_match(line, kPragmaOnce)) line.clear();
    out += line + "\n";
  }
}

}  // namespace

std::string bundle_source(const std::string& path, const std::string& root) {
  const std::filesystem::path root_path = std::filesystem::weakly_canonical(root);
  const std::filesystem::path file = std::filesystem::weakly_canonical(path);
  const std::string relative = std::filesystem::relative(file, root_path).string();
  std::set<std::string> seen;
  std::string out;
  inline_file(root_path, relative, seen, out);
  return out;
}

std::string content_hash(const std::string& text) {
  const std::array<uint8_t, 32> digest =
      llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  static const char* const kHex = "0123456789abcdef";
  std::string hex;
  for (uint8_t byte : digest) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 15];
  }
  return hex;
}

}  // namespace attune::gen
