// The `attune` command: parses flags and calls the libraries.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "cli/attention_command.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"attune: autotuned FlashAttention-style kernels"};
  app.require_subcommand(1);
  attune::cli::AttentionOptions attention;
  CLI::App* attention_cmd = attune::cli::add_attention_command(app, attention);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as for every other error.
    std::cerr << "attune: error: " << e.what() << " (see 'attune --help')\n";
    return 2;
  }
  try {
    if (attention_cmd->parsed()) attune::cli::run_attention(attention);
  } catch (const attune::Error& e) {
    std::cerr << "attune: error: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "attune: internal error: " << e.what() << '\n';
    return 3;
  }
  return 0;
}
