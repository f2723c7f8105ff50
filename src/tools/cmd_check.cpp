// `k3 check DIR [--json]`: the whole load plan from headers and configs, every problem found.
// Exit 1 when the plan has problems.
#include <cstdio>
#include <iostream>

#include "quant/families/family.h"
#include "quant/plan/plan_report.h"
#include "tools/cli.h"

namespace k3::cli {

Registered add_check(CLI::App& app) {
  struct Options {
    std::string dir;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("check", "Compute the load plan of a checkpoint from its headers and report every problem");
  cmd->add_option("dir", opt->dir, "checkpoint directory")->required();
  cmd->add_flag("--json", opt->json, "Print the plan as one JSON object");
  return {cmd, [opt] {
            const LoadPlan plan = plan_checkpoint(opt->dir);
            if (opt->json) {
              std::cout << plan_json(plan, opt->dir).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            } else {
              std::fputs(plan_table(plan, opt->dir).c_str(), stdout);
            }
            return plan.ok() ? 0 : 1;
          }};
}

}  // namespace k3::cli
