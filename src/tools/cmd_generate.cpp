// `k3 generate --model DIR (--ids 1,2,3 | --prompt TEXT) --max-tokens N [--greedy | --temperature T
// [--top-p P] [--top-k K] [--seed S]] [--ignore-eos] [--show-special] [--grammar FILE | --json-schema
// FILE] [--json] [--threads N]`: prints
// the generated ids (one line, space-separated), or with --prompt the generated text, decoded as it
// streams, without the added tokens' names unless --show-special (docs/cli.md); with --json a last
// line with one JSON object: the ids (and "text", as streamed, with --prompt) and the prefill /
// decode throughput. Greedy is the default. prefill_tok_s = prompt tokens / prefill time; decode_tok_s =
// decode steps (one token each, after the prefill's) / decode time.
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tools/cli.h"
#include "tools/grammar_args.h"
#include "tools/model_args.h"

namespace k3::cli {

Registered add_generate(CLI::App& app) {
  struct Options {
    ModelArgs model;
    GenerationArgs generation;
    bool json = false;
    bool show_special = false;
    GrammarArgs grammar;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt of token ids or text");
  add_model_args(cmd, opt->model, PromptInput::kIdsOrText);
  add_generation_args(cmd, opt->generation);
  cmd->add_flag("--json", opt->json, "print one JSON object with ids and timings");
  cmd->add_flag("--show-special", opt->show_special, "with --prompt: keep special tokens (markers, EOS) in the text");
  add_grammar_args(cmd, opt->grammar);
  return {cmd, [opt] {
            GenerateOptions g = generation_options(opt->generation);
            LoadedModel m = load_model(opt->model, g.max_tokens);
            if (opt->grammar.given()) {
              std::optional<Tokenizer> own;  // --ids: the vocabulary only for the grammar
              if (!m.tokenizer) own.emplace(load_tokenizer(opt->model.model, m.engine->config().vocab_size));
              g.constraint = grammar_constraint(text_grammar(opt->grammar, m.tokenizer ? *m.tokenizer : *own, *m.engine), *m.engine, g.max_tokens);
            }
            g.on_prefill = terminal_prefill_progress();
            std::string text;
            std::optional<StreamDecoder> decoder;
            if (m.tokenizer) {
              decoder.emplace(*m.tokenizer, opt->show_special ? SkipSpecial::kNone : SkipSpecial::kAll);
              g.on_token = [&](int64_t id) {
                const std::string piece = decoder->push(static_cast<uint32_t>(id));
                text += piece;
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
              };
            }
            const GenerateResult r = generate(*m.engine, m.ids, g);
            if (decoder) {
              const std::string tail = decoder->finish();
              text += tail;
              std::printf("%s\n", tail.c_str());
            } else if (!opt->json) {
              for (size_t i = 0; i < r.ids.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(r.ids[i]));
              std::printf("\n");
            }
            if (!opt->json) return 0;
            auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
            nlohmann::json j = {
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
            if (decoder) j["text"] = text;
            std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            return 0;
          }};
}

}  // namespace k3::cli
