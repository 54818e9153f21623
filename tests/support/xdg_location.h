// The rule the default locations follow (the kernel cache's directory, the
// tuning database's file), by the XDG Base Directory spec: an explicit
// variable wins unless empty; then $XDG_..._HOME when absolute (a relative
// one is ignored, as the spec says); then a directory under $HOME.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/env_guard.h"

namespace attune::testing {

// Checks `location` (a default_directory or default_path) against the rule,
// `under` the XDG directory or $HOME/`home_dir`. The caller's EnvGuard
// restores the three variables; this leaves only HOME set.
inline void expect_xdg_location(const std::function<std::filesystem::path()>& location, const std::string& variable,
                                const std::string& xdg_variable, const std::string& home_dir,
                                const std::string& under) {
  EnvGuard::set(variable, "/x/explicit");
  EnvGuard::set(xdg_variable, "/x/xdg");
  EnvGuard::set("HOME", "/home/someone");
  EXPECT_EQ(location(), std::filesystem::path("/x/explicit"));

  EnvGuard::set(variable, "");  // empty counts as unset
  EXPECT_EQ(location(), std::filesystem::path("/x/xdg") / under);
  EnvGuard::set(variable, std::nullopt);
  EXPECT_EQ(location(), std::filesystem::path("/x/xdg") / under);

  EnvGuard::set(xdg_variable, "relative/xdg");  // ignored, as the XDG spec says
  EXPECT_EQ(location(), std::filesystem::path("/home/someone") / home_dir / under);
  EnvGuard::set(xdg_variable, std::nullopt);
  EXPECT_EQ(location(), std::filesystem::path("/home/someone") / home_dir / under);
}

}  // namespace attune::testing
