// `attune doctor`: what the runtime finds on this machine, a line each.
#pragma once

#include <CLI/CLI.hpp>

namespace attune::cli {

CLI::App* add_doctor_command(CLI::App& app);
void run_doctor();

}  // namespace attune::cli
