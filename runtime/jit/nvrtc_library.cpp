#include "runtime/jit/nvrtc_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <set>

#include "core/dl_symbol.h"
#include "core/env.h"

namespace attune::nvrtc {

namespace {

namespace fs = std::filesystem;

// Version numbers of a name like libnvrtc.so.13.0 ({13, 0}); libnvrtc.so is {}.
std::vector<int> so_version(const std::string& name) {
  std::vector<int> out;
  static const std::regex kNumber(R"(\.(\d+))");
  const std::string tail = name.substr(std::string("libnvrtc.so").size());
  for (std::sregex_iterator it(tail.begin(), tail.end(), kNumber), end; it != end; ++it) {
    out.push_back(std::stoi((*it)[1]));
  }
  return out;
}

// The NVRTC libraries in `dir` (not its builtins or .alt variants), newest
// first, the versioned name before the bare one.
std::vector<std::string> libraries_in(const fs::path& dir) {
  static const std::regex kName(R"(libnvrtc\.so(\.\d+)*)");
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, kName)) names.push_back(name);
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    const std::vector<int> va = so_version(a);
    const std::vector<int> vb = so_version(b);
    if (va.empty() != vb.empty()) return !va.empty();
    return va != vb ? va > vb : a < b;
  });
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back((dir / n).string());
  return out;
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// Site directories from the paths of files this process has mapped: a
// Python that imported anything from site-packages shows it there.
void add_mapped_sites(std::vector<std::string>& out) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
      const std::size_t at = path.find(marker);
      if (at != std::string::npos) out.push_back(path.substr(0, at + std::strlen(marker) - 1));
    }
  }
}

// The site directories `python3` on PATH reports (nothing when there is none).
void add_python3_sites(std::vector<std::string>& out) {
  const std::string path = env("PATH");
  bool found = false;
  for (std::size_t begin = 0; begin <= path.size() && !found;) {
    const std::size_t end = std::min(path.find(':', begin), path.size());
    const fs::path dir = path.substr(begin, end - begin);
    std::error_code ec;
    found = !dir.empty() && fs::exists(dir / "python3", ec);
    begin = end + 1;
  }
  if (!found) return;
  const char* command =
      "python3 -c 'import site, sys; print(\"\\n\".join(site.getsitepackages() + [site.getusersitepackages()] + "
      "sys.path))' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command, "r"), pclose);
  if (!pipe) return;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe.get()) != nullptr) {
    std::string dir(buffer);
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
    if (!dir.empty()) out.push_back(dir);
  }
}

// Loads `path` and every entry point into `lib`; returns "" or why not.
std::string load(const std::string& path, Library& lib) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    std::string reason = error != nullptr ? error : "dlopen failed";
    if (reason.find("No such file") != std::string::npos ||
        reason.find("cannot open shared object") != std::string::npos) {
      reason = "not found";
    }
    return reason;
  }
  std::string missing;
  const auto need = [&](auto& fn, const char* symbol) {
    if (missing.empty() && !resolve_symbol(handle, symbol, fn)) missing = symbol;
  };
  int (*version)(int*, int*) = nullptr;
  need(version, "nvrtcVersion");
  need(lib.create_program, "nvrtcCreateProgram");
  need(lib.destroy_program, "nvrtcDestroyProgram");
  need(lib.compile_program, "nvrtcCompileProgram");
  need(lib.add_name_expression, "nvrtcAddNameExpression");
  need(lib.get_lowered_name, "nvrtcGetLoweredName");
  need(lib.get_program_log_size, "nvrtcGetProgramLogSize");
  need(lib.get_program_log, "nvrtcGetProgramLog");
  need(lib.get_ptx_size, "nvrtcGetPTXSize");
  need(lib.get_ptx, "nvrtcGetPTX");
  need(lib.get_cubin_size, "nvrtcGetCUBINSize");
  need(lib.get_cubin, "nvrtcGetCUBIN");
  need(lib.get_error_string, "nvrtcGetErrorString");
  if (!missing.empty()) {
    dlclose(handle);
    return "not NVRTC or too old (no symbol " + missing + ")";
  }
  if (version(&lib.major, &lib.minor) != 0) {
    dlclose(handle);
    return "nvrtcVersion failed";
  }
  lib.path = path;
  // The loader's answer for a bare soname: the file it really opened.
  if (path.find('/') == std::string::npos) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(version), &info) != 0 && info.dli_fname != nullptr) lib.path = info.dli_fname;
  }
  lib.version = std::to_string(lib.major) + "." + std::to_string(lib.minor);
  return "";  // stays loaded for the life of the process
}

std::mutex g_mutex;
const Library* g_library = nullptr;  // set once, never freed

// The steps in order, each with its candidates and, for a step that has
// none, what it saw instead ("CUDA_HOME unset").
struct Step {
  std::string source;
  std::vector<std::string> paths;
  std::string note;
};

std::vector<Step> steps() {
  std::vector<Step> out;
  const std::string explicit_path = env("ATTUNE_NVRTC");
  Step given{"ATTUNE_NVRTC", {}, explicit_path.empty() ? "unset" : ""};
  if (!explicit_path.empty()) {
    std::error_code ec;
    given.paths = fs::is_directory(explicit_path, ec) ? libraries_in(explicit_path) : std::vector{explicit_path};
    if (given.paths.empty()) given.note = explicit_path + ": no libnvrtc.so* there";
  }
  out.push_back(given);

  const std::string cuda_home = env("CUDA_HOME");
  std::set<fs::path> toolkit_dirs;
  for (const auto& [source, root] : {std::pair<std::string, std::string>{"CUDA_HOME", cuda_home},
                                     std::pair<std::string, std::string>{"/usr/local/cuda", "/usr/local/cuda"}}) {
    Step step{source, {}, ""};
    if (root.empty()) {
      step.note = "unset";
    } else {
      const fs::path dir = fs::path(root) / "lib64";
      if (!toolkit_dirs.insert(dir).second) continue;
      step.paths = libraries_in(dir);
      if (step.paths.empty()) step.note = dir.string() + ": no libnvrtc.so*";
    }
    out.push_back(step);
  }

  Step pip{"python site-packages", {}, ""};
  const std::vector<std::string> sites = python_site_directories();
  for (const std::string& site : sites) {
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(site) / "nvidia", ec), end; !ec && it != end; it.increment(ec)) {
      for (const std::string& lib : libraries_in(it->path() / "lib")) pip.paths.push_back(lib);
    }
  }
  if (pip.paths.empty()) {
    std::string listed;
    for (const std::string& s : sites) listed += (listed.empty() ? "" : ", ") + s;
    pip.note = "no nvidia/*/lib/libnvrtc.so* in " +
               (listed.empty() ? std::string("(no Python site directory found)") : listed);
  }
  out.push_back(pip);

  out.push_back({"system search path", {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, ""});
  return out;
}

}  // namespace

std::vector<std::string> python_site_directories() {
  std::vector<std::string> found;
  const std::string given = env("ATTUNE_PYTHON_SITE");
  for (std::size_t begin = 0; begin < given.size();) {
    const std::size_t end = std::min(given.find(':', begin), given.size());
    if (end > begin) found.push_back(given.substr(begin, end - begin));
    begin = end + 1;
  }
  add_mapped_sites(found);
  add_python3_sites(found);
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& dir : found) {
    std::error_code ec;
    if (fs::is_directory(dir, ec) && seen.insert(dir).second) out.push_back(dir);
  }
  return out;
}

std::vector<Candidate> candidates() {
  std::vector<Candidate> out;
  for (const Step& step : steps()) {
    for (const std::string& path : step.paths) out.push_back({step.source, path});
  }
  return out;
}

const Library& library() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_library != nullptr) return *g_library;
  std::string looked;
  for (const Step& step : steps()) {
    std::string tried;
    for (const std::string& path : step.paths) {
      auto lib = std::make_unique<Library>();
      const std::string why = load(path, *lib);
      if (why.empty()) {
        g_library = lib.release();
        return *g_library;
      }
      tried.append(tried.empty() ? "" : ", ").append(path).append(" ").append(why);
    }
    looked += (looked.empty() ? "" : "; ") + step.source + ": " + (tried.empty() ? step.note : tried);
  }
  throw NvrtcUnavailable(one_line("NVRTC not found (needed to compile kernels); looked in " + looked +
                                  "; install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`, or set "
                                  "ATTUNE_NVRTC to a libnvrtc.so; the emulator and reference backends work "
                                  "without it"));
}

bool available(std::string* why) {
  return succeeds([] { library(); }, why);
}

}  // namespace attune::nvrtc
