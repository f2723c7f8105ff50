#include "tools/chat_parse.h"

#include <cstdio>
#include <optional>

#include "chat/output_parsers.h"
#include "chat/token_pieces.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "model/config.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {

// The input's token ids when it is a JSON array of integers (whitespace around allowed).
std::optional<std::vector<int64_t>> token_ids(const std::string& input) {
  const std::string_view t = chat::trim_space(input);
  if (t.empty() || t.front() != '[') return std::nullopt;
  const std::optional<chat::Json> j = chat::parse_model_json(t);
  if (!j || !j->is_array()) return std::nullopt;
  std::vector<int64_t> ids;
  for (const chat::Json& v : *j) {
    if (!v.is_number_integer()) return std::nullopt;
    ids.push_back(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX} ? INT64_MAX : v.get<int64_t>());
  }
  return ids;
}

}  // namespace

void add_chat_parse_args(CLI::App* cmd, ChatParseArgs& args, const std::vector<CLI::Option*>& excluded) {
  auto* parse = cmd->add_option("--parse", args.file,
                                "parse a raw reply from FILE (text with marker names, or a JSON array of token ids) "
                                "and print the message; no model is loaded");
  auto* format = cmd->add_option("--format", args.format, "--parse: the chat format (default: the --model's, else k3)")
                     ->check(CLI::IsMember({"k3", "kimi-linear"}));
  auto* thinking = cmd->add_flag("--thinking", args.thinking, "--parse: the prompt opened the think channel (k3)");
  auto* tokenizer = cmd->add_option("--tokenizer", args.tokenizer, "--parse: tokenizer directory, for token ids");
  CLI::Option* model = cmd->get_option("--model");
  model->required(false);
  tokenizer->excludes(model);
  model->excludes(tokenizer);
  for (CLI::Option* o : excluded) {
    parse->excludes(o);
    o->excludes(parse);
  }
  for (CLI::Option* o : {format, thinking, tokenizer}) o->needs(parse);
  cmd->callback([parse, model, format, thinking, &args] {
    if (parse->count() == 0 && model->count() == 0) throw CLI::RequiredError("--model");
    if (format->count() > 0 && thinking->count() > 0 && args.format == "kimi-linear")
      throw CLI::ValidationError("--thinking", "the Kimi-Linear format has no think channel");
  });
}

int run_chat_parse(const ChatParseArgs& args, const std::string& model) {
  std::optional<K3Config> config;  // only config.json is read
  if (!model.empty()) config = parse_k3_config(load_json_file(model + "/config.json"));
  std::string format = args.format;
  if (format.empty()) format = config && config->model_type != ModelType::kKimiK3 ? "kimi-linear" : "k3";
  if (format == "kimi-linear" && args.thinking)
    throw Error(Where{"", "", "--thinking"}, "the Kimi-Linear format has no think channel");
  const std::string input = read_whole_file(args.file);
  const auto parser = chat::make_output_parser(format == "k3", args.thinking);
  if (const std::optional<std::vector<int64_t>> ids = token_ids(input)) {
    if (!config && args.tokenizer.empty())
      throw Error(Where{args.file, "", ""}, "token ids need a tokenizer: give --model or --tokenizer");
    const Tokenizer tok = config ? load_tokenizer(model, config->vocab_size) : Tokenizer::load(args.tokenizer);
    const chat::TokenPieces pieces(tok, parser->marker_names(), SkipSpecial::kAll);
    for (size_t i = 0; i < ids->size(); ++i) {
      const int64_t id = (*ids)[i];
      if (id < 0 || id >= static_cast<int64_t>(tok.n_vocab()))
        throw Error(Where{args.file, "", "[" + std::to_string(i) + "]"},
                    "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(tok.n_vocab()) + ")");
      pieces.feed(*parser, static_cast<uint32_t>(id));
    }
  } else {
    parser->feed(input);
  }
  parser->finish();
  std::printf("%s\n", chat::dump_output(parser->message().to_json()).c_str());
  return 0;
}

}  // namespace k3::cli
