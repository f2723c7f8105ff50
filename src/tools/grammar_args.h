// --grammar FILE | --json-schema FILE on `k3 generate` and `k3 chat`: structured outputs from the
// command line (docs/structured-outputs.md). generate constrains the generated text itself; chat
// constrains the reply's content in the checkpoint's chat format (--json-schema also renders the
// request's response_format note, as a client's response_format does).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "chat/request.h"
#include "grammar/grammar.h"
#include "runtime/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace k3 {
class Engine;
}

namespace k3::cli {

struct GrammarArgs {
  std::string grammar;      // --grammar: GBNF
  std::string json_schema;  // --json-schema: a JSON Schema
  bool given() const { return !grammar.empty() || !json_schema.empty(); }
};
void add_grammar_args(CLI::App* cmd, GrammarArgs& args);

// The files' grammar over the engine's vocabulary: for generate, the generated text's.
grammar::CompiledGrammarPtr text_grammar(const GrammarArgs& args, const Tokenizer& tokenizer, const Engine& engine);
// For chat: --json-schema becomes `request`'s response_format; the reply grammar (chat/reply_grammar.h)
// of the request, with --grammar as its content. nullptr when nothing constrains the reply.
grammar::CompiledGrammarPtr reply_grammar(const GrammarArgs& args, chat::Request& request, bool k3_format,
                                          const Tokenizer& tokenizer, const Engine& engine);
// A fresh matcher of `grammar` ending at the engine's EOS ids; throws k3::Error naming --max-tokens
// when the shortest text the grammar allows does not fit in max_tokens.
std::shared_ptr<TokenConstraint> grammar_constraint(const grammar::CompiledGrammarPtr& grammar, const Engine& engine,
                                                    int64_t max_tokens);

}  // namespace k3::cli
