// What the emulator's planted-bug tests share: the line a "planted:" or role
// mark sits on, the check that a fault holds a report of a kind at that line
// saying something (and, from element_bits.h, 16-bit element bits and values).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <iostream>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "emulator/report.h"
#include "tests/emulator/element_bits.h"

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

// Runs a kernel with the planted bug `p` (a PlantedBug, or any struct with
// its kind, mark and says): it must fail with p's report, at p's mark in
// `file`.
template <class Bug, class Run>
void expect_planted_bug_reported(const Bug& p, const std::string& file, Run run) {
  try {
    run();
    ADD_FAILURE() << "the planted bug was not reported";
  } catch (const emu::KernelFault& fault) {
    expect_reported(fault, p.kind, file, p.mark, p.says);
  }
}

}  // namespace attune::testing
