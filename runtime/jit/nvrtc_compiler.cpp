#include "runtime/jit/nvrtc_compiler.h"

#include <chrono>
#include <regex>

#include "runtime/jit/nvrtc_library.h"

namespace attune {

namespace {

constexpr int kSuccess = 0;  // NVRTC_SUCCESS

// Frees the program however the compile ends.
struct Program {
  const nvrtc::Library& nvrtc;
  nvrtc::Library::Program handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtc.destroy_program(&handle);
  }
};

}  // namespace

std::string nvrtc_version() {
  std::string why;
  return nvrtc::available(&why) ? nvrtc::library().version : "none";
}

void parse_ptxas_usage(std::string_view log, CompileResult& result) {
  const std::string text(log);
  std::smatch m;
  if (std::regex_search(text, m, std::regex(R"(Used (\d+) registers)"))) result.registers = std::stoi(m[1]);
  if (std::regex_search(text, m,
                        std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    result.stack_bytes = std::stoi(m[1]);
    result.spill_bytes = std::stoi(m[2]) + std::stoi(m[3]);
  }
}

std::string slow_ptxas_message(std::string_view log) {
  static const std::regex kSlow(R"(\(C75(08|10|11|15)\))");
  std::size_t begin = 0;
  while (begin < log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string_view::npos) end = log.size();
    std::string line(log.substr(begin, end - begin));
    if (std::regex_search(line, kSlow)) return line;
    begin = end + 1;
  }
  return "";
}

CompileResult compile_with_nvrtc(std::string_view source, std::string_view program_name,
                                 std::string_view name_expression, std::string_view arch,
                                 const std::vector<std::string>& extra_options) {
  const auto start = std::chrono::steady_clock::now();
  CompileResult result;
  const nvrtc::Library& lib = nvrtc::library();
  Program program{lib};
  const std::string src(source);
  const std::string name(program_name);
  if (lib.create_program(&program.handle, src.c_str(), name.c_str(), 0, nullptr, nullptr) != kSuccess) {
    result.log = "nvrtcCreateProgram failed";
    return result;
  }
  const std::string expression(name_expression);
  lib.add_name_expression(program.handle, expression.c_str());
  const std::string arch_option = "--gpu-architecture=" + std::string(arch);
  std::vector<const char*> options = {"--std=c++20", arch_option.c_str(), "--ptxas-options=-v"};
  for (const std::string& option : extra_options) options.push_back(option.c_str());
  const int status = lib.compile_program(program.handle, static_cast<int>(options.size()), options.data());
  std::size_t log_size = 0;
  lib.get_program_log_size(program.handle, &log_size);
  result.log.resize(log_size);
  if (log_size > 0) lib.get_program_log(program.handle, result.log.data());
  while (!result.log.empty() && (result.log.back() == '\0' || result.log.back() == '\n')) result.log.pop_back();
  if (status == kSuccess) {
    const char* lowered = nullptr;
    if (lib.get_lowered_name(program.handle, expression.c_str(), &lowered) == kSuccess && lowered != nullptr) {
      result.lowered_name = lowered;
    }
    std::size_t ptx_size = 0;
    if (lib.get_ptx_size(program.handle, &ptx_size) == kSuccess && ptx_size > 1) {
      result.ptx.resize(ptx_size);
      lib.get_ptx(program.handle, result.ptx.data());
      result.ptx.pop_back();  // the terminating NUL
    }
    std::size_t cubin_size = 0;
    if (lib.get_cubin_size(program.handle, &cubin_size) == kSuccess && cubin_size > 0) {
      result.cubin.resize(cubin_size);
      lib.get_cubin(program.handle, result.cubin.data());
    }
    result.ok = !result.cubin.empty() && !result.lowered_name.empty();
    if (!result.ok && result.log.empty()) result.log = "NVRTC produced no cubin (is the architecture a real sm_XX?)";
    parse_ptxas_usage(result.log, result);
    if (const std::string slow = slow_ptxas_message(result.log); result.ok && !slow.empty()) {
      result.ok = false;
      result.cubin.clear();
      result.log += "\nrefused: ptxas reports a slowdown the kernel would carry silently: " + slow;
    }
  }
  if (!result.ok) result.log += "\n(while compiling " + expression + " for " + std::string(arch) + ")";
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace attune
