// `k3 generate --model DIR --ids 1,2,3 --max-tokens N [--greedy | --temperature T [--top-p P]
// [--top-k K] [--seed S]] [--ignore-eos] [--json] [--threads N]`: prints the generated ids (one line,
// space-separated); with --json one JSON object with the ids and the prefill / decode throughput.
// Greedy is the default. prefill_tok_s = prompt tokens / prefill time; decode_tok_s = decode steps
// (one token each, after the prefill's) / decode time.
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "runtime/generate.h"
#include "tools/cli.h"
#include "tools/model_args.h"

namespace k3::cli {

Registered add_generate(CLI::App& app) {
  struct Options {
    ModelArgs model;
    int64_t max_tokens = 16;
    bool greedy = false, json = false, ignore_eos = false;
    double temperature = 1.0, top_p = 1.0;
    int64_t top_k = 0;
    uint64_t seed = 0;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt of token ids");
  add_model_args(cmd, opt->model);
  cmd->add_option("--max-tokens", opt->max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber)->capture_default_str();
  auto* greedy = cmd->add_flag("--greedy", opt->greedy, "argmax decoding (the default)");
  auto* temp = cmd->add_option("--temperature", opt->temperature, "sample at this temperature (> 0)");
  temp->excludes(greedy);
  cmd->add_option("--top-p", opt->top_p, "nucleus mass in (0, 1]")->needs(temp);
  cmd->add_option("--top-k", opt->top_k, "keep the K most likely tokens (0 = all)")->needs(temp);
  cmd->add_option("--seed", opt->seed, "sampling seed")->needs(temp);
  cmd->add_flag("--ignore-eos", opt->ignore_eos, "keep generating after an end-of-sequence token");
  cmd->add_flag("--json", opt->json, "print one JSON object with ids and timings");
  return {cmd, [opt, temp] {
            GenerateOptions g;
            g.max_tokens = opt->max_tokens;
            g.stop_at_eos = !opt->ignore_eos;
            g.sampling.greedy = temp->count() == 0;
            g.sampling.temperature = opt->temperature;
            g.sampling.top_p = opt->top_p;
            g.sampling.top_k = opt->top_k;
            g.sampling.seed = opt->seed;
            validate(g.sampling);
            LoadedModel m = load_model(opt->model);
            const GenerateResult r = generate(*m.engine, m.ids, g);
            if (!opt->json) {
              for (size_t i = 0; i < r.ids.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(r.ids[i]));
              std::printf("\n");
              return 0;
            }
            auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
            const nlohmann::json j = {
                {"generated_ids", r.ids},
                {"prompt_tokens", m.ids.size()},
                {"generated_tokens", r.ids.size()},
                {"stopped_at_eos", r.stopped_at_eos},
                {"prefill_s", r.prefill_seconds},
                {"decode_s", r.decode_seconds},
                {"decode_steps", r.decode_steps},
                {"prefill_tok_s", rate(static_cast<double>(m.ids.size()), r.prefill_seconds)},
                {"decode_tok_s", rate(static_cast<double>(r.decode_steps), r.decode_seconds)},
                {"threads", omp_get_max_threads()},
                {"family", m.engine->plan().family},
            };
            std::cout << j.dump() << "\n";
            return 0;
          }};
}

}  // namespace k3::cli
