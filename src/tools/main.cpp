// Entry point: parse the command line, run one command, turn every error into one line on
// stderr. Exit codes: 0 success, 1 error in the input or the run, 2 usage error.
#include <cstdio>
#include <exception>
#include <vector>

#include "core/error.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"k3: Kimi-K3 / Kimi-Linear inference engine", "k3"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");

  std::vector<k3::cli::Registered> commands = {
      k3::cli::add_inspect(app),
      k3::cli::add_check(app),
      k3::cli::add_make_tiny(app),
      k3::cli::add_devices(app),
      k3::cli::add_tokenize(app),
      k3::cli::add_logits(app),
      k3::cli::add_generate(app),
      k3::cli::add_chat(app),
      k3::cli::add_bench(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "k3: usage error: %s (see k3 --help)\n", e.what());
    return 2;
  }

  for (auto& c : commands) {
    if (!c.command->parsed()) continue;
    try {
      return c.action();
    } catch (const k3::Error& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.command->get_name().c_str(), e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.command->get_name().c_str(), e.what());
      return 1;
    }
  }
  return 2;
}
