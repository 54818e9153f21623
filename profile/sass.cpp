#include "profile/sass.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "runtime/jit/nvrtc_library.h"

namespace attune::profile {

namespace {

namespace fs = std::filesystem;

bool executable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); }

std::vector<fs::path> candidates() {
  std::vector<fs::path> out;
  if (const std::string given = env("ATTUNE_NVDISASM"); !given.empty()) out.emplace_back(given);
  const std::string path = env("PATH");
  for (std::size_t begin = 0; begin <= path.size();) {
    const std::size_t end = std::min(path.find(':', begin), path.size());
    if (end > begin) out.push_back(fs::path(path.substr(begin, end - begin)) / "nvdisasm");
    begin = end + 1;
  }
  if (const std::string home = env("CUDA_HOME"); !home.empty()) out.push_back(fs::path(home) / "bin" / "nvdisasm");
  out.emplace_back("/usr/local/cuda/bin/nvdisasm");
  const std::string cache = env("XDG_CACHE_HOME").empty() ? env("HOME") + "/.cache" : env("XDG_CACHE_HOME");
  out.push_back(fs::path(cache) / "attune" / "tools" / "bin" / "nvdisasm");
  for (const std::string& site : nvrtc::python_site_directories()) {
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(site) / "nvidia", ec), end; !ec && it != end; it.increment(ec)) {
      out.push_back(it->path() / "bin" / "nvdisasm");
    }
  }
  return out;
}

}  // namespace

std::string find_nvdisasm() {
  for (const fs::path& p : candidates()) {
    if (executable(p)) return p.string();
  }
  return "";
}

std::string disassemble(const std::vector<char>& cubin) {
  const std::string tool = find_nvdisasm();
  if (tool.empty()) {
    throw Error(
        "nvdisasm not found (looked in $ATTUNE_NVDISASM, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, "
        "~/.cache/attune/tools/bin and python3's site-packages/nvidia/*/bin); tools/setup.sh installs it "
        "from NVIDIA's PyPI wheel nvidia-cuda-nvdisasm");
  }
  char name[] = "/tmp/attune-sass-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) throw IoError("profile: cannot create a temporary cubin file");
  const std::string path = name;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  }
  ::close(fd);
  const std::string command = "'" + tool + "' -c '" + path + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string text;
  if (pipe) {
    std::array<char, 65536> buffer{};
    std::size_t n = 0;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0) text.append(buffer.data(), n);
  }
  const int status = pipe ? pclose(pipe.release()) : -1;
  fs::remove(path);
  if (status != 0) throw IoError("profile: nvdisasm failed on the cubin: " + text.substr(0, 400));
  return text;
}

SassMix count_sass(std::string_view sass) {
  SassMix mix;
  // "        /*0120*/                   @!P0 HMMA.16816.F32.BF16 R4, R8, R12, R4 ;"
  static const std::regex kLine(R"(^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?)");
  std::istringstream lines{std::string(sass)};
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (!std::regex_search(line, m, kLine)) continue;
    const std::string opcode = m[1];
    ++mix[opcode];
    if (opcode == "MUFU" && m[2].str().rfind(".EX2", 0) == 0) ++mix["MUFU.EX2"];
    if (opcode == "MUFU" && m[2].str().rfind(".TANH", 0) == 0) ++mix["MUFU.TANH"];
    if (opcode == "UTMALDG" && m[2].str().find(".MULTICAST") != std::string::npos) ++mix["UTMALDG.MULTICAST"];
  }
  return mix;
}

}  // namespace attune::profile
