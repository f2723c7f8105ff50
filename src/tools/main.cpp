// Entry point: parse the command line, run one command, turn every error into one line on
// stderr. Exit codes: 0 success, 1 error in the input or the run, 2 usage error.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/path_error.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"k3: Kimi-K3 / Kimi-Linear inference engine", "k3"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");

  std::vector<k3::cli::Registered> commands = {
      k3::cli::add_inspect(app),
      k3::cli::add_check(app),
      k3::cli::add_make_tiny(app),
      k3::cli::add_make_headers(app),
      k3::cli::add_quantize(app),
      k3::cli::add_devices(app),
      k3::cli::add_tokenize(app),
      k3::cli::add_logits(app),
      k3::cli::add_generate(app),
      k3::cli::add_chat(app),
      k3::cli::add_bench(app),
      k3::cli::add_serve(app),
      k3::cli::add_eval(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown option is named first: CLI11 checks required options before leftover arguments.
    const std::vector<std::string> extra = app.remaining(true);
    std::string message = e.what();
    if (!extra.empty()) {
      const bool option = extra.front().starts_with("-");
      message = std::string(option ? "unknown option " : "unexpected argument ") + extra.front();
      if (extra.size() > 1) message += " (and " + std::to_string(extra.size() - 1) + " more)";
    }
    std::fprintf(stderr, "k3: usage error: %s (see k3 --help)\n", message.c_str());
    return 2;
  }

  for (auto& c : commands) {
    if (!c.command->parsed()) continue;
    try {
      return c.action();
    } catch (const k3::Error& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.command->get_name().c_str(), e.what());
      return 1;
    } catch (const std::filesystem::filesystem_error& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.command->get_name().c_str(), k3::path_error(e).what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "k3 %s: error: %s\n", c.command->get_name().c_str(), e.what());
      return 1;
    }
  }
  return 2;
}
