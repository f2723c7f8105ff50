// `k3 tokenize --model DIR (--text T | --file F) [--json] [--specials]`: the ids of a text with the
// checkpoint's tokenizer (tiktoken.model + tokenizer_config.json). Special-token names in the text
// are ordinary text unless --specials is given.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"

namespace k3::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool json = false;
  bool specials = false;
};

std::string read_input(const TokenizeOptions& o) {
  if (o.file.empty()) return o.text;
  return read_whole_file(o.file);
}

int run(const TokenizeOptions& o) {
  const Tokenizer tok = Tokenizer::load(o.model);
  const std::string text = read_input(o);
  const auto ids = tok.encode(text, o.specials ? Specials::kAll : Specials::kNone);
  if (o.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (uint32_t id : ids) {
      // A token may hold part of a code point: its text is shown with U+FFFD replacement.
      pieces.push_back(tok.decode(std::vector<uint32_t>{id}));
    }
    nlohmann::json out = {{"count", ids.size()}, {"ids", ids}, {"pieces", pieces}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

Registered add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text with a checkpoint's tokenizer");
  cmd->add_option("--model", o->model, "Checkpoint directory with tiktoken.model and tokenizer_config.json")->required();
  auto* text = cmd->add_option("--text", o->text, "Text to tokenize");
  auto* file = cmd->add_option("--file", o->file, "File whose contents to tokenize");
  text->excludes(file);
  file->excludes(text);
  cmd->add_flag("--json", o->json, "Print {count, ids, pieces} as JSON");
  cmd->add_flag("--specials", o->specials, "Recognise special-token names in the text");
  cmd->callback([text, file] {
    if (text->count() == 0 && file->count() == 0) throw CLI::RequiredError("--text or --file");
  });
  return {cmd, [o] { return run(*o); }};
}

}  // namespace k3::cli
