// `k3 eval --model DIR [--task add|sort|copy|recall|all] [--n N] [--seed S] [--kl-base DIR] [--json]
// [--verbose] [model flags as k3 serve: --device, --threads, --max-sequences …]`: the held-out examples
// of docs/eval-tasks.md through the model's chat format, decoded greedily in batches, scored by
// exact match of the parsed content; with --kl-base the KL divergence of the model's next-token
// distributions from the base model's along the base's greedy replies. Prints a table, or one JSON
// object with --json; --verbose prints failing examples to stderr.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "eval/eval.h"
#include "eval/report.h"
#include "quant/families/family.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {

constexpr int64_t kDefaultEvalSequences = 64;
constexpr size_t kFailuresShown = 3;

// A checkpoint directory's config, or a one-line error naming its config.json.
K3Config read_config(const std::string& dir) {
  const CheckpointDir ckpt = open_checkpoint_dir(dir);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  return *ckpt.config;
}

// The eval's prompts are short: on the CPU the context defaults to at most kDefaultCudaContext
// (the CPU cache is sized for every sequence at the full context).
void default_context(ModelArgs& args, const K3Config& config) {
  if (args.max_context || parse_device(args.device) >= 0) return;
  args.max_context = std::min(context_limit(args, config, false), kDefaultCudaContext);
}

// With --kl-base both models share the GPU. A byte size applies to each; a share p% of the free
// memory becomes p/2 % for the model (loaded first) and the same amount for the base, i.e.
// (p/2) / (100 − p/2) of the memory then free. Returns the base's --gpu-memory; sets the model's.
std::string split_gpu_memory(ModelArgs& args) {
  if (!args.gpu_memory.ends_with('%')) return args.gpu_memory;
  const double p = std::stod(args.gpu_memory.substr(0, args.gpu_memory.size() - 1));
  const double half = p / 2;
  args.gpu_memory = std::to_string(half) + "%";
  return std::to_string(std::min(100.0, 100.0 * half / (100.0 - half))) + "%";  // p ≤ 100: half ≤ 50
}

void note(bool verbose, const std::string& text) {
  if (verbose) std::fprintf(stderr, "k3 eval: %s\n", text.c_str());
}

}  // namespace

Registered add_eval(CLI::App& app) {
  struct Options {
    ModelArgs model;
    std::string tasks = "all";
    int64_t n = 100;
    uint64_t seed = 0;
    std::string kl_base;
    bool json = false, verbose = false;
  };
  auto opt = std::make_shared<Options>();
  opt->model.serving = true;  // --max-sequences sizes the CPU engine too: the batch
  opt->model.max_sequences = kDefaultEvalSequences;
  auto* cmd = app.add_subcommand("eval", "Score a model on the held-out task examples (exact match), optionally KL against a base");
  add_model_args(cmd, opt->model, PromptInput::kNone);
  cmd->get_option("--max-sequences")->description("sequences decoded at once (state slots, CPU and CUDA)");
  cmd->get_option("--max-context")
      ->description("tokens per sequence (prompt plus reply); default: 4096, on the CPU at most the config's max_position_embeddings");
  cmd->add_option("--task", opt->tasks, "add | sort | copy | recall | all, or a comma-separated list")
      ->check(parsed_by([](const std::string& t) { eval::parse_tasks(t); }))
      ->capture_default_str();
  cmd->add_option("--n", opt->n, "examples per task")->check(integer_in(1, eval::kMaxExamplesPerTask))->capture_default_str();
  cmd->add_option("--seed", opt->seed, "seed of the example draws")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--kl-base", opt->kl_base,
                  "base model directory (same tokenizer and vocabulary): KL(base || model) along the base's greedy replies");
  cmd->add_flag("--json", opt->json, "print one JSON object instead of the table");
  cmd->add_flag("--verbose", opt->verbose, "progress and a few failing examples per task on stderr");
  return {cmd, [opt] {
            eval::EvalOptions options;
            options.tasks = eval::parse_tasks(opt->tasks);
            options.n = opt->n;
            options.seed = opt->seed;
            ModelArgs model_args = opt->model;
            const K3Config config = read_config(model_args.model);
            const Tokenizer tokenizer = load_tokenizer(model_args.model, config.vocab_size);
            std::optional<ModelArgs> base_args;
            std::optional<K3Config> base_config;
            std::optional<Tokenizer> base_tokenizer;
            if (!opt->kl_base.empty()) {
              base_args = model_args;
              base_args->model = opt->kl_base;
              base_config = read_config(opt->kl_base);
              base_tokenizer = load_tokenizer(opt->kl_base, base_config->vocab_size);
              eval::check_same_vocabulary(config, tokenizer, *base_config, *base_tokenizer, opt->kl_base);
              if (parse_device(model_args.device) >= 0) base_args->gpu_memory = split_gpu_memory(model_args);
              default_context(*base_args, *base_config);
            }
            default_context(model_args, config);
            const EngineOptions engine_opts = engine_options(model_args, config);
            const std::vector<eval::Example> examples = eval::make_eval_examples(options);

            eval::EvalReport report;
            report.model = model_args.model;
            report.device = model_args.device;
            report.seed = options.seed;
            note(opt->verbose, "loading " + model_args.model);
            Engine engine(model_args.model, engine_opts);
            note(opt->verbose, std::to_string(examples.size()) + " examples on " + model_args.model);
            report.result = eval::run_eval(engine, tokenizer, examples, options);
            if (base_args) {
              note(opt->verbose, "loading the base " + opt->kl_base);
              Engine base(opt->kl_base, engine_options(*base_args, *base_config));
              note(opt->verbose, std::to_string(examples.size()) + " examples on the base " + opt->kl_base);
              eval::KlReport kl{opt->kl_base, eval::run_eval(base, *base_tokenizer, examples, options), {}};
              note(opt->verbose, "teacher-forcing both models along the base's replies");
              kl.summary = eval::kl_against_base(base, kl.base_result, engine, options);
              report.kl = std::move(kl);
            }
            if (opt->verbose) std::fputs(eval::failures_text(report.result, kFailuresShown).c_str(), stderr);
            if (opt->json) {
              std::printf("%s\n", eval::report_json(report).dump(-1, ' ', false, chat::Json::error_handler_t::replace).c_str());
            } else {
              std::fputs(eval::report_table(report).c_str(), stdout);
            }
            std::fflush(stdout);
            return 0;
          }};
}

}  // namespace k3::cli
