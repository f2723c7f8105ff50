#include "tools/grammar_args.h"

#include "chat/reply_grammar.h"
#include "core/error.h"
#include "io/file.h"
#include "runtime/engine.h"
#include "runtime/grammar_constraint.h"

namespace k3::cli {
namespace {

grammar::VocabularyPtr vocabulary(const Tokenizer& tokenizer, const Engine& engine) {
  return grammar::TokenVocabulary::from_tokenizer(tokenizer, static_cast<uint32_t>(engine.config().vocab_size));
}

// The schema file's JSON (property order kept); errors name the file.
grammar::OrderedJson schema_file(const std::string& path) {
  const std::string text = read_whole_file(path);
  try {
    return grammar::OrderedJson::parse(text);
  } catch (const std::exception& e) {
    throw Error(Where{path, "", ""}, std::string("not JSON: ") + e.what());
  }
}

// Errors of a grammar built from `path`, prefixed with the file.
template <class F>
auto from_file(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (!e.where().file.empty()) throw;
    throw Error(Where{path, "", e.where().field}, e.detail());
  }
}

}  // namespace

void add_grammar_args(CLI::App* cmd, GrammarArgs& args) {
  auto* g = cmd->add_option("--grammar", args.grammar, "constrain the output to a GBNF grammar (FILE)")->check(CLI::ExistingFile);
  auto* s = cmd->add_option("--json-schema", args.json_schema, "constrain the output to JSON under a JSON Schema (FILE)")
                ->check(CLI::ExistingFile);
  g->excludes(s);
}

grammar::CompiledGrammarPtr text_grammar(const GrammarArgs& args, const Tokenizer& tokenizer, const Engine& engine) {
  if (!args.grammar.empty()) {
    return from_file(args.grammar, [&] { return grammar::compile_gbnf(read_whole_file(args.grammar), vocabulary(tokenizer, engine)); });
  }
  return from_file(args.json_schema, [&] { return grammar::compile_json_schema(schema_file(args.json_schema), vocabulary(tokenizer, engine)); });
}

grammar::CompiledGrammarPtr reply_grammar(const GrammarArgs& args, chat::Request& request, bool k3_format,
                                          const Tokenizer& tokenizer, const Engine& engine) {
  std::optional<grammar::Grammar> content;
  if (!args.grammar.empty()) content = from_file(args.grammar, [&] { return grammar::parse_gbnf(read_whole_file(args.grammar)); });
  if (!args.json_schema.empty()) {
    const grammar::OrderedJson schema = schema_file(args.json_schema);
    request.response_format = chat::Json{{"type", "json_schema"}, {"json_schema", {{"name", "schema"}, {"schema", schema}}}};
  }
  const std::string& source = args.grammar.empty() ? args.json_schema : args.grammar;
  const std::optional<grammar::Grammar> reply = from_file(source, [&] {
    return chat::reply_grammar(request, k3_format ? chat::ReplyFormat::kKimiK3 : chat::ReplyFormat::kKimiLinear, content);
  });
  if (!reply) return nullptr;
  return from_file(source, [&] { return grammar::compile_gbnf(reply->to_gbnf(), vocabulary(tokenizer, engine)); });
}

std::shared_ptr<TokenConstraint> grammar_constraint(const grammar::CompiledGrammarPtr& grammar, const Engine& engine,
                                                    int64_t max_tokens) {
  auto constraint = std::make_shared<GrammarConstraint>(grammar, engine.config().tokens.eos);
  constraint->require_budget(max_tokens, "--max-tokens");
  return constraint;
}

}  // namespace k3::cli
