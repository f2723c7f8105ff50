// Grammar-constrained decoding: the entry points (docs/structured-outputs.md).
//
//   auto vocab = TokenVocabulary::from_tokenizer(tokenizer, model_vocab_size);  // once per model
//   GrammarCache cache;                                                          // once per server
//   auto g = cache.json_schema(schema_text, vocab);        // shared, immutable, thread-safe
//   Matcher m(g, {.stop_ids = {eos_id}});                  // one per sequence
//   loop: m.fill_mask(bits); sample under bits; m.accept(token);  until m.is_terminated()
#pragma once

#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace k3::grammar {

using CompiledGrammarPtr = std::shared_ptr<const CompiledGrammar>;
using VocabularyPtr = std::shared_ptr<const TokenVocabulary>;

// Each throws k3::Error (one line) on a bad grammar / schema.
CompiledGrammarPtr compile_gbnf(std::string_view text, VocabularyPtr vocab, CompileOptions options = {});
CompiledGrammarPtr compile_json_schema(std::string_view schema_text, VocabularyPtr vocab,
                                       const JsonSchemaOptions& schema_options = {}, CompileOptions options = {});
CompiledGrammarPtr compile_json_schema(const OrderedJson& schema, VocabularyPtr vocab,
                                       const JsonSchemaOptions& schema_options = {}, CompileOptions options = {});
// response_format json_object: any JSON object.
CompiledGrammarPtr compile_json_object(VocabularyPtr vocab, const JsonSchemaOptions& schema_options = {},
                                       CompileOptions options = {});

// Compiled grammars by (kind, text, options, vocabulary fingerprint), least recently used dropped
// beyond `capacity`. Thread-safe; a grammar asked for while it compiles is compiled once and
// handed to every caller. Failures are not kept.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64, CompileOptions options = {});

  CompiledGrammarPtr gbnf(std::string_view text, const VocabularyPtr& vocab);
  CompiledGrammarPtr json_schema(std::string_view schema_text, const VocabularyPtr& vocab,
                                 const JsonSchemaOptions& schema_options = {});
  CompiledGrammarPtr json_schema(const OrderedJson& schema, const VocabularyPtr& vocab,
                                 const JsonSchemaOptions& schema_options = {});
  CompiledGrammarPtr json_object(const VocabularyPtr& vocab, const JsonSchemaOptions& schema_options = {});

  size_t size() const;
  size_t hits() const;
  size_t misses() const;

 private:
  CompiledGrammarPtr get(const std::string& key, const std::function<CompiledGrammarPtr()>& compile);

  struct Entry {
    std::shared_future<CompiledGrammarPtr> value;
    std::list<std::string>::iterator lru;
  };
  size_t capacity_;
  CompileOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace k3::grammar
