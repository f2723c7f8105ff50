// `k3 check DIR [--json]`: the whole load plan from headers and configs, every problem found.
// Exit 1 when the plan has problems.
#include <cstdio>
#include <iostream>

#include "io/file_digest.h"
#include "quant/families/family.h"
#include "quant/plan/plan_report.h"
#include "tools/cli.h"

namespace k3::cli {

Registered add_check(CLI::App& app) {
  struct Options {
    std::string dir;
    bool json = false;
    bool verify = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("check", "Compute the load plan of a checkpoint from its headers and report every problem");
  cmd->add_option("dir", opt->dir, "checkpoint directory")->required();
  cmd->add_flag("--json", opt->json, "Print the plan as one JSON object");
  cmd->add_flag("--verify", opt->verify, "Also check whole-file sha256 digests (ExpertPack payload), reading every byte");
  return {cmd, [opt] {
            LoadPlan plan = plan_checkpoint(opt->dir);
            // Digests are read-everything checks: only with --verify (loading always runs them).
            std::vector<std::string> digest_lines;
            Json digests = Json::array();
            for (const FileDigest& d : plan.digests) {
              std::string state = "not verified (k3 check --verify reads it)";
              if (opt->verify) {
                try {
                  verify_file_digest(d);
                  state = "verified";
                } catch (const Error& e) {
                  plan.problems.push_back({e.where(), e.detail()});
                  state = "MISMATCH";
                }
              }
              digest_lines.push_back("sha256 of " + d.path + ": " + state + "\n");
              digests.push_back({{"file", d.path}, {"sha256", d.sha256}, {"verified", state == "verified"}});
            }
            if (opt->json) {
              Json doc = plan_json(plan, opt->dir);
              doc["digests"] = digests;
              std::cout << doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            } else {
              std::fputs(plan_table(plan, opt->dir).c_str(), stdout);
              for (const auto& line : digest_lines) std::fputs(line.c_str(), stdout);
            }
            return plan.ok() ? 0 : 1;
          }};
}

}  // namespace k3::cli
