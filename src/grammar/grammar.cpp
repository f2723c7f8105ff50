#include "grammar/grammar.h"

namespace k3::grammar {
namespace {

std::string options_key(const JsonSchemaOptions& o) { return o.whitespace == JsonWhitespace::kCompact ? "c" : "b"; }

}  // namespace

CompiledGrammarPtr compile_gbnf(std::string_view text, VocabularyPtr vocab, CompileOptions options) {
  return CompiledGrammar::compile(parse_gbnf(text), std::move(vocab), options);
}

CompiledGrammarPtr compile_json_schema(std::string_view schema_text, VocabularyPtr vocab,
                                       const JsonSchemaOptions& schema_options, CompileOptions options) {
  return CompiledGrammar::compile(json_schema_to_grammar(schema_text, schema_options), std::move(vocab), options);
}

CompiledGrammarPtr compile_json_schema(const OrderedJson& schema, VocabularyPtr vocab,
                                       const JsonSchemaOptions& schema_options, CompileOptions options) {
  return CompiledGrammar::compile(json_schema_to_grammar(schema, schema_options), std::move(vocab), options);
}

CompiledGrammarPtr compile_json_object(VocabularyPtr vocab, const JsonSchemaOptions& schema_options,
                                       CompileOptions options) {
  return CompiledGrammar::compile(json_object_grammar(schema_options), std::move(vocab), options);
}

GrammarCache::GrammarCache(size_t capacity, CompileOptions options) : capacity_(capacity), options_(options) {}

CompiledGrammarPtr GrammarCache::get(const std::string& key, const std::function<CompiledGrammarPtr()>& compile) {
  std::promise<CompiledGrammarPtr> promise;
  std::shared_future<CompiledGrammarPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ready = it->second.value;
    } else {
      ++misses_;
      lru_.push_front(key);
      entries_[key] = {promise.get_future().share(), lru_.begin()};
    }
  }
  if (ready.valid()) return ready.get();  // compiled, or being compiled by another caller
  try {
    CompiledGrammarPtr g = compile();
    promise.set_value(g);
    std::lock_guard<std::mutex> lock(mu_);
    while (entries_.size() > capacity_ && lru_.size() > 1) {
      entries_.erase(lru_.back());
      lru_.pop_back();
    }
    return g;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    throw;
  }
}

CompiledGrammarPtr GrammarCache::gbnf(std::string_view text, const VocabularyPtr& vocab) {
  const std::string key = "gbnf\n" + vocab->fingerprint() + "\n" + std::string(text);
  return get(key, [&] { return compile_gbnf(text, vocab, options_); });
}

CompiledGrammarPtr GrammarCache::json_schema(std::string_view schema_text, const VocabularyPtr& vocab,
                                             const JsonSchemaOptions& schema_options) {
  const std::string key = "schema\n" + options_key(schema_options) + "\n" + vocab->fingerprint() + "\n" + std::string(schema_text);
  return get(key, [&] { return compile_json_schema(schema_text, vocab, schema_options, options_); });
}

CompiledGrammarPtr GrammarCache::json_schema(const OrderedJson& schema, const VocabularyPtr& vocab,
                                             const JsonSchemaOptions& schema_options) {
  return json_schema(std::string_view(schema.dump()), vocab, schema_options);
}

CompiledGrammarPtr GrammarCache::json_object(const VocabularyPtr& vocab, const JsonSchemaOptions& schema_options) {
  const std::string key = "object\n" + options_key(schema_options) + "\n" + vocab->fingerprint();
  return get(key, [&] { return compile_json_object(vocab, schema_options, options_); });
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}
size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
size_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace k3::grammar
