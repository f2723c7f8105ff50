// `k3 chat --parse FILE [--format k3|kimi-linear] [--thinking] [--model DIR | --tokenizer DIR]`:
// parses a raw model reply — text with the marker names spelled out, or a JSON array of token ids
// (read through the tokenizer of --model or --tokenizer, markers by id) — with the chat format's
// output parser and prints the message as one JSON line, as `k3 chat` does after a turn. No model
// weights are loaded.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace k3::cli {

struct ChatParseArgs {
  std::string file;       // --parse
  std::string format;     // --format; empty: the --model config's format, else k3
  bool thinking = false;  // --thinking: the prompt opened the think channel (K3)
  std::string tokenizer;  // --tokenizer DIR
};

// Adds --parse, --format, --thinking and --tokenizer to `k3 chat`. --model turns optional with
// --parse (and stays required without); --parse refuses the options in `excluded`.
void add_chat_parse_args(CLI::App* cmd, ChatParseArgs& args, const std::vector<CLI::Option*>& excluded);

// Exit 0; k3::Error for an unreadable file, token ids without a tokenizer, an id outside the
// vocabulary, --thinking with the Kimi-Linear format.
int run_chat_parse(const ChatParseArgs& args, const std::string& model);

}  // namespace k3::cli
