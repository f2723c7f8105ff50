// `k3 chat --model DIR [--messages FILE.json] [--max-tokens N] [sampling flags as k3 generate]
// [--show-special] [--grammar FILE | --json-schema FILE] [--threads N]`: renders the conversation in the checkpoint's chat format (Kimi-K3
// XTML for model_type kimi_k3, the Kimi-Linear format otherwise) with the generation prompt,
// generates, streams the reply's reasoning and content to stdout as they are decoded, then prints the
// parsed assistant message as one JSON line. The reply is parsed from the generated tokens less the
// added tokens other than the format's markers (which the parser consumes), so no marker text shows;
// --show-special keeps every token and streams the raw generated text instead. With --messages one
// turn on that request (a messages array or {"messages": ...}); without it an interactive loop: each
// stdin line is a user message, the conversation is kept, EOF ends. `k3 chat --parse FILE` only parses
// a reply given as a file (tools/chat_parse.h), without loading a model.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "chat/output_parsers.h"
#include "chat/token_pieces.h"
#include "core/error.h"
#include "io/file.h"
#include "tools/chat_parse.h"
#include "tools/cli.h"
#include "tools/grammar_args.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {

void print(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void print_delta(const chat::ChatDelta& d) {
  print(d.reasoning_content);
  print(d.content);
}

struct ChatModel {
  Engine& engine;
  const Tokenizer& tokenizer;
  bool k3_format;
  bool show_special;
};

// One assistant turn: generate from the rendered request, handing each id to the parser; prints
// the parsed deltas, or with show_special the raw text.
chat::ParsedMessage stream_turn(const ChatModel& m, const std::vector<int64_t>& prompt, GenerateOptions g,
                                chat::OutputParser& parser) {
  const chat::TokenPieces pieces(m.tokenizer, parser.marker_names(), m.show_special ? SkipSpecial::kNone : SkipSpecial::kAll);
  StreamDecoder raw(m.tokenizer);
  g.on_token = [&](int64_t id) {
    const chat::ChatDelta delta = pieces.feed(parser, static_cast<uint32_t>(id));
    if (m.show_special) print(raw.push(static_cast<uint32_t>(id)));
    else print_delta(delta);
  };
  const GenerateResult r = generate(m.engine, prompt, g);
  const chat::ChatDelta last = parser.finish(r.stopped_at_eos);
  if (m.show_special) print(raw.finish());
  else print_delta(last);
  return parser.message();
}

// One turn; a reply constrained by --grammar / --json-schema or the request's response_format /
// tool_choice follows its grammar (a fresh matcher per turn).
chat::ParsedMessage chat_turn(const ChatModel& m, chat::Request request, GenerateOptions g, const GrammarArgs& grammar) {
  if (const grammar::CompiledGrammarPtr reply = reply_grammar(grammar, request, m.k3_format, m.tokenizer, m.engine)) {
    g.constraint = grammar_constraint(reply, m.engine, g.max_tokens);
  }
  const auto segments = m.k3_format ? chat::render_k3(request) : chat::render_kimi_linear(request);
  const std::vector<uint32_t> ids = chat::encode(m.tokenizer, segments);
  const std::vector<int64_t> prompt(ids.begin(), ids.end());
  check_prompt_fits(m.engine, prompt.size(), g.max_tokens);
  const chat::ParsedMessage reply = stream_turn(m, prompt, g, *chat::make_output_parser(m.k3_format, request.thinking));
  std::printf("\n%s\n", chat::dump_output(reply.to_json()).c_str());
  std::fflush(stdout);
  return reply;
}

// The reply as a history message for the next turn.
chat::Message as_message(const chat::ParsedMessage& reply) {
  chat::Message m;
  m.role = "assistant";
  if (reply.content) m.content.push_back(*reply.content);
  m.reasoning = reply.reasoning_content.value_or("");
  for (const auto& c : reply.tool_calls) {
    std::optional<chat::Json> arguments = chat::parse_model_json(c.arguments);
    chat::ToolCall call{c.id, c.name, arguments ? std::move(*arguments) : chat::Json(), false};
    if (!call.arguments.is_object()) call = {c.id, c.name, c.arguments, true};
    m.tool_calls.push_back(std::move(call));
  }
  return m;
}

}  // namespace

Registered add_chat(CLI::App& app) {
  struct Options {
    ModelArgs model;
    GenerationArgs generation;
    std::string messages;
    bool show_special = false;
    ChatParseArgs parse;
    GrammarArgs grammar;
  };
  auto opt = std::make_shared<Options>();
  opt->generation.max_tokens = 512;
  auto* cmd = app.add_subcommand("chat", "Chat with a model: one request from a file, or interactively");
  add_model_args(cmd, opt->model, PromptInput::kNone);
  add_generation_args(cmd, opt->generation);
  cmd->add_option("--messages", opt->messages, "request JSON file (messages array or {\"messages\": ...})");
  auto* show = cmd->add_flag("--show-special", opt->show_special, "stream the raw reply, special tokens (markers, EOS) included");
  add_grammar_args(cmd, opt->grammar);
  add_chat_parse_args(cmd, opt->parse, {cmd->get_option("--messages"), show, cmd->get_option("--grammar"), cmd->get_option("--json-schema")});
  return {cmd, [opt] {
            if (!opt->parse.file.empty()) return run_chat_parse(opt->parse, opt->model.model);
            GenerateOptions g = generation_options(opt->generation);
            g.on_prefill = terminal_prefill_progress();
            std::optional<chat::Request> request;
            if (!opt->messages.empty()) request = chat::parse_request(read_whole_file(opt->messages), opt->messages);
            const CheckpointDir ckpt = open_checkpoint_dir(opt->model.model);
            if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
            Engine engine(opt->model.model, engine_options(opt->model, *ckpt.config));
            const Tokenizer tokenizer = load_tokenizer(opt->model.model, engine.config().vocab_size);
            const ChatModel m{engine, tokenizer, engine.config().model_type == ModelType::kKimiK3, opt->show_special};
            if (request) {
              chat_turn(m, *request, g, opt->grammar);
              return 0;
            }
            chat::Request conversation;
            const bool tty = isatty(STDIN_FILENO);
            std::string line;
            while (true) {
              if (tty) std::fprintf(stderr, "> ");
              if (!std::getline(std::cin, line)) break;
              chat::Message user;
              user.role = "user";
              user.content.push_back(line);
              conversation.messages.push_back(std::move(user));
              conversation.messages.push_back(as_message(chat_turn(m, conversation, g, opt->grammar)));
            }
            return 0;
          }};
}

}  // namespace k3::cli
