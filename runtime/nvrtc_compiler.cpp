#include "runtime/nvrtc_compiler.h"

#include <nvrtc.h>

#include <chrono>
#include <regex>

namespace attune {

namespace {

// Frees the program however the compile ends.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtcDestroyProgram(&handle);
  }
};

}  // namespace

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
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

CompileResult compile_with_nvrtc(std::string_view source, std::string_view program_name,
                                 std::string_view name_expression, std::string_view arch) {
  const auto start = std::chrono::steady_clock::now();
  CompileResult result;
  Program program;
  const std::string src(source);
  const std::string name(program_name);
  if (nvrtcCreateProgram(&program.handle, src.c_str(), name.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    result.log = "nvrtcCreateProgram failed";
    return result;
  }
  const std::string expression(name_expression);
  nvrtcAddNameExpression(program.handle, expression.c_str());
  const std::string arch_option = "--gpu-architecture=" + std::string(arch);
  const char* options[] = {"--std=c++20", arch_option.c_str(), "--ptxas-options=-v"};
  const nvrtcResult status = nvrtcCompileProgram(program.handle, static_cast<int>(std::size(options)), options);
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(program.handle, &log_size);
  result.log.resize(log_size);
  if (log_size > 0) nvrtcGetProgramLog(program.handle, result.log.data());
  while (!result.log.empty() && (result.log.back() == '\0' || result.log.back() == '\n')) result.log.pop_back();
  if (status == NVRTC_SUCCESS) {
    const char* lowered = nullptr;
    if (nvrtcGetLoweredName(program.handle, expression.c_str(), &lowered) == NVRTC_SUCCESS && lowered != nullptr) {
      result.lowered_name = lowered;
    }
    std::size_t cubin_size = 0;
    if (nvrtcGetCUBINSize(program.handle, &cubin_size) == NVRTC_SUCCESS && cubin_size > 0) {
      result.cubin.resize(cubin_size);
      nvrtcGetCUBIN(program.handle, result.cubin.data());
    }
    result.ok = !result.cubin.empty() && !result.lowered_name.empty();
    if (!result.ok && result.log.empty()) result.log = "NVRTC produced no cubin (is the architecture a real sm_XX?)";
    parse_ptxas_usage(result.log, result);
  }
  if (!result.ok) result.log += "\n(while compiling " + expression + " for " + std::string(arch) + ")";
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace attune
