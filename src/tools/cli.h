// The k3 command-line tool: each command lives in its own cmd_<name>.cpp and registers itself
// with add_<name>(), returning the action main() runs when that subcommand was given.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace k3::cli {

using Action = std::function<int()>;

struct Registered {
  CLI::App* command;
  Action action;
};

Registered add_inspect(CLI::App& app);
Registered add_check(CLI::App& app);
Registered add_make_tiny(CLI::App& app);
Registered add_make_headers(CLI::App& app);
Registered add_quantize(CLI::App& app);
Registered add_devices(CLI::App& app);
Registered add_tokenize(CLI::App& app);
Registered add_logits(CLI::App& app);
Registered add_generate(CLI::App& app);
Registered add_chat(CLI::App& app);
Registered add_bench(CLI::App& app);
Registered add_serve(CLI::App& app);
Registered add_eval(CLI::App& app);

}  // namespace k3::cli
