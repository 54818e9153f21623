// What the emulator's planted-bug tests share: the line a "planted:" or role
// mark sits on, the check that a fault holds a report of a kind at that line
// saying something, and 16-bit element bits and values for the GEMM tests.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <iostream>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "emulator/report.h"

namespace attune::testing {

// "tests/emulator/FILE:N" for the first line of FILE holding `mark` (lines
// that name site_of_mark itself are skipped, so a test may mark its own
// kernel).
inline std::string site_of_mark(const std::string& file, const std::string& mark) {
  std::ifstream in(std::string(ATTUNE_SOURCE_DIR) + "/tests/emulator/" + file);
  int line = 0;
  for (std::string text; std::getline(in, text);) {
    ++line;
    if (text.find(mark) != std::string::npos && text.find("site_of_mark") == std::string::npos) {
      return "tests/emulator/" + file + ":" + std::to_string(line);
    }
  }
  ADD_FAILURE() << "no line of " << file << " marked '" << mark << "'";
  return "";
}

// The fault holds a report of `kind` at the line of `mark` whose detail says `says`.
inline void expect_reported(const emu::KernelFault& fault, emu::BugKind kind, const std::string& file,
                            const std::string& mark, const std::string& says) {
  const std::string site = site_of_mark(file, mark);
  bool found = false;
  for (const emu::BugReport& r : fault.reports()) {
    if (r.kind == kind && r.site == site && r.detail.find(says) != std::string::npos) found = true;
  }
  EXPECT_TRUE(found) << "expected " << emu::to_string(kind) << " at " << site << " saying '" << says << "'; got:\n"
                     << fault.what();
  std::cout << fault.reports().front().to_string() << "\n";
}

template <class D>
u16 bits_of(float x) {
  return std::is_same_v<D, Bf16> ? float_to_bfloat16_bits(x) : float_to_half_bits(x);
}
template <class D>
double value_of(u16 bits) {
  return std::is_same_v<D, Bf16> ? static_cast<double>(std::bit_cast<float>(static_cast<u32>(bits) << 16))
                                 : static_cast<double>(half_bits_to_float(bits));
}

}  // namespace attune::testing
