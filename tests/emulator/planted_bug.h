// The parameter of a suite of planted-bug tests: a plant a test kernel
// takes, the report the emulator must draw for it (its kind, at the line of
// a mark, saying something), and the test's name.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "emulator/report.h"

namespace attune::testing {

struct PlantedBug {
  i32 plant;
  emu::BugKind kind;
  const char* mark;  // the line the report points at
  const char* says;  // part of its detail
  const char* name;  // the test's
};

// Names each test of the suite (INSTANTIATE_TEST_SUITE_P's last argument).
inline std::string planted_bug_name(const ::testing::TestParamInfo<PlantedBug>& info) { return info.param.name; }

}  // namespace attune::testing
