// JSON Schema → grammar: the translation of small schemas, the errors, and for the schemas of
// schemas.json: their documents and random valid documents are accepted token by token, invalid
// documents are refused at the first offending token, and constrained random walks produce
// documents that validate.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "error_of.h"
#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "schema_sampler.h"

namespace k3::grammar::test {
namespace {

const std::vector<OrderedJson>& corpus() {
  static const std::vector<OrderedJson> c = [] {
    std::ifstream in(std::filesystem::path(K3_SOURCE_DIR) / "tests/grammar/schemas.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return OrderedJson::parse(ss.str()).get<std::vector<OrderedJson>>();
  }();
  return c;
}

CompiledGrammarPtr small_grammar(const OrderedJson& schema, JsonWhitespace ws = JsonWhitespace::kBounded) {
  static std::map<std::string, CompiledGrammarPtr> cache;
  const std::string key = schema.dump() + (ws == JsonWhitespace::kCompact ? "c" : "b");
  auto& g = cache[key];
  if (!g) g = compile_json_schema(schema, small_vocab(), {ws}, {.threads = 1});
  return g;
}

std::string gbnf(const char* schema) { return json_schema_to_grammar(std::string_view(schema)).to_gbnf(); }

std::string schema_error(const char* schema) {
  return k3::test::error_of([&] { json_schema_to_grammar(std::string_view(schema)); });
}

// Accepts the text token by token; returns the index of the first refused token (ids.size() when
// all were accepted and the grammar can end there, ids.size() + 1 when it cannot end).
size_t first_refused(const CompiledGrammarPtr& g, const std::vector<uint32_t>& ids) {
  Matcher m(g);
  for (size_t i = 0; i < ids.size(); ++i)
    if (!m.accept(ids[i])) return i;
  return m.can_end() ? ids.size() : ids.size() + 1;
}

TEST(JsonSchema, SmallSchemas) {
  EXPECT_EQ(gbnf(R"j({"type": "boolean"})j"), "root ::= \"true\" | \"false\"\n");
  EXPECT_EQ(gbnf(R"j({"enum": ["a", 1, null, {"k": [true]}]})j"),
            "ws ::= (\" \" | \"\\n\" [\\t ]{0,20})?\n"
            "root ::= \"\\\"a\\\"\" | \"1\" | \"null\" | \"{\" ws \"\\\"k\\\"\" ws \":\" ws \"[\" ws \"true\" ws \"]\" ws \"}\"\n");
  EXPECT_EQ(gbnf(R"j({"type": "integer", "minimum": 5, "maximum": 12})j"), "root ::= [5-9] | \"1\" [0-2]\n");
  EXPECT_EQ(gbnf(R"j({"type": "integer", "minimum": -3, "maximum": 0})j"), "root ::= [0] | \"-\" [1-3]\n");
  EXPECT_EQ(gbnf(R"j({"enum": ["x", 3], "type": "string", "title": "t"})j"), "root ::= \"\\\"x\\\"\"\n");
  // The grammar text reads back.
  for (const OrderedJson& entry : corpus()) {
    const Grammar g = json_schema_to_grammar(entry["schema"]);
    EXPECT_EQ(parse_gbnf(g.to_gbnf()).to_gbnf(), g.to_gbnf()) << entry["name"];
  }
}

TEST(JsonSchema, Errors) {
  EXPECT_EQ(schema_error(R"j({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 2}}})j"),
            "json schema #/properties/a: unsupported keyword 'multipleOf'");
  EXPECT_EQ(schema_error(R"j({"type": "object", "patternProperties": {"^x": {}}})j"),
            "json schema #: unsupported keyword 'patternProperties'");
  EXPECT_EQ(schema_error(R"j({"$ref": "#/$defs/missing"})j"), "json schema #/$ref: reference '#/$defs/missing' does not resolve");
  EXPECT_EQ(schema_error(R"j({"$ref": "other.json#/a"})j"),
            "json schema #/$ref: only local references ('#/...') are supported: 'other.json#/a'");
  EXPECT_EQ(schema_error(R"j({"allOf": [{"type": "string"}, {"minLength": 2}]})j"),
            "json schema #/allOf: only allOf with exactly one schema is supported");
  EXPECT_EQ(schema_error(R"j({"type": "array", "items": {"type": "string", "pattern": "(?=a)"}})j"),
            "json schema #/items/pattern: regex: offset 1: lookaround and named groups are not supported");
  EXPECT_EQ(schema_error(R"j({"type": "string", "format": "uri"})j"),
            "json schema #/format: unsupported format 'uri' (supported: date, time, date-time, uuid, email, ipv4)");
  EXPECT_EQ(schema_error(R"j({"type": "object", "properties": {}, "required": ["a"]})j"),
            "json schema #/required: required property 'a' is not in properties");
  EXPECT_EQ(schema_error(R"j({"type": "array", "minItems": 3, "maxItems": 2})j"),
            "json schema #: minItems is above the number of items allowed");
  EXPECT_EQ(schema_error(R"j({"type": "integer", "minimum": 3, "maximum": 2.5})j"),
            "json schema #: no number lies between the minimum and the maximum");
  EXPECT_EQ(schema_error(R"j({"type": "array", "uniqueItems": true})j"), "json schema #/uniqueItems: uniqueItems: true is not supported");
  EXPECT_EQ(schema_error(R"j({"properties": {"a": false}, "required": ["a"]})j"),
            "json schema #/properties/a: the schema false allows no value");
  EXPECT_EQ(schema_error(R"j({"type": "strin"})j"), "json schema #/type: unknown type 'strin'");
  EXPECT_EQ(schema_error(R"j({"enum": [1, 2], "type": "string"})j"), "json schema #: no enum / const value satisfies the other keywords");
  EXPECT_EQ(schema_error(R"j({"$ref": "#", "type": "object"})j"),
            "json schema #: '$ref' together with other constraining keywords is not supported");
  EXPECT_NE(schema_error("{\"type\": ").find("json schema: invalid JSON"), std::string::npos);
}

TEST(JsonSchema, Whitespace) {
  const OrderedJson schema = OrderedJson::parse(R"j({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})j");
  auto compact = small_grammar(schema, JsonWhitespace::kCompact);
  auto bounded = small_grammar(schema);
  auto accepts = [](const CompiledGrammarPtr& g, const std::string& text) {
    Matcher m(g);
    return m.accept_text(text) && m.can_end();
  };
  EXPECT_TRUE(accepts(compact, "{\"a\":1}"));
  EXPECT_FALSE(accepts(compact, "{\"a\": 1}"));
  EXPECT_TRUE(accepts(bounded, "{ \"a\" : 1 }"));
  EXPECT_TRUE(accepts(bounded, "{\n" + std::string(20, ' ') + "\"a\": 1\n}"));
  EXPECT_FALSE(accepts(bounded, "{\n" + std::string(21, ' ') + "\"a\": 1\n}"));
  EXPECT_FALSE(accepts(bounded, "{  \"a\": 1}"));
  EXPECT_FALSE(accepts(bounded, " {\"a\": 1}"));
}

TEST(JsonSchema, GenericJson) {
  auto g = CompiledGrammar::compile(json_object_grammar(), small_vocab(), {.threads = 1});
  auto accepts = [&](const std::string& text) {
    Matcher m(g);
    return m.accept_text(text) && m.can_end();
  };
  EXPECT_TRUE(accepts("{\"a\": [1, -2.5e3, \"x\\u00e9\", {\"b\": null}], \"c\": true}"));
  EXPECT_TRUE(accepts("{}"));
  EXPECT_FALSE(accepts("[1]"));
  EXPECT_FALSE(accepts("{\"a\": 01}"));
  EXPECT_FALSE(accepts("{\"a\": \"\\ud800\"}"));
  EXPECT_FALSE(accepts("{\"a\": \"\x01\"}"));
}

// Each schema's documents and random valid documents, compact and pretty-printed, are accepted
// token by token with the small vocabulary.
TEST(JsonSchema, DocumentsAndRandomDocumentsAreAccepted) {
  std::mt19937 rng(7);
  for (const OrderedJson& entry : corpus()) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    const OrderedJson& schema = entry["schema"];
    auto g = small_grammar(schema);
    std::vector<OrderedJson> docs = entry["documents"].get<std::vector<OrderedJson>>();
    for (int i = 0; i < 12; ++i) docs.push_back(sample_value(schema, schema, rng));
    for (const OrderedJson& doc : docs) {
      ASSERT_EQ(json_schema_violation(doc, schema), "") << doc.dump();
      for (const std::string& text : {doc.dump(-1, ' ', false), doc.dump(2, ' ', false)}) {
        const auto ids = tokenize_longest(*small_vocab(), text);
        EXPECT_EQ(first_refused(g, ids), ids.size()) << text;
      }
    }
  }
}

// The same with the real-size stand-in vocabulary and its own tokenization, for a few schemas
// (compiling against 200K tokens takes a while); skipped without scripts/tokenizer_reference.sh.
TEST(JsonSchema, RandomDocumentsWithTheReferenceVocabulary) {
  const Reference* ref = reference_vocab();
  if (!ref) GTEST_SKIP() << "no build/tokenizer-reference: run scripts/tokenizer_reference.sh";
  std::mt19937 rng(9);
  for (const OrderedJson& entry : corpus()) {
    const std::string name = entry["name"].get<std::string>();
    if (name != "tool_weather" && name != "any_of" && name != "tree" && name != "unicode" && name != "code_review") continue;
    SCOPED_TRACE(name);
    const OrderedJson& schema = entry["schema"];
    auto g = compile_json_schema(schema, ref->vocab);
    std::vector<OrderedJson> docs = entry["documents"].get<std::vector<OrderedJson>>();
    for (int i = 0; i < 12; ++i) docs.push_back(sample_value(schema, schema, rng));
    for (const OrderedJson& doc : docs) {
      for (const std::string& text : {doc.dump(-1, ' ', false), doc.dump(2, ' ', false)}) {
        const auto ids = ref->tokenizer->encode(text, Specials::kNone);
        Matcher m(g, {{ref->eos}});
        std::vector<uint32_t> mask(m.mask_words());
        for (size_t i = 0; i < ids.size(); ++i) {
          m.fill_mask(mask);
          ASSERT_TRUE((mask[ids[i] >> 5] >> (ids[i] & 31)) & 1) << text << " token " << i;
          ASSERT_TRUE(m.accept(ids[i])) << text << " token " << i;
        }
        EXPECT_TRUE(m.accept(ref->eos)) << text;
      }
    }
  }
}

// Mutations of valid documents that the validator rejects are refused; the first refused token
// is the one holding the first byte the byte-level matcher refuses.
TEST(JsonSchema, InvalidDocumentsAreRefusedAtTheFirstOffendingToken) {
  std::mt19937 rng(11);
  const char* inserts[] = {"x", "\"", ",", "}", "]", "1", "-", " ", "\\", "null", "{", "é"};
  size_t checked = 0;
  for (const OrderedJson& entry : corpus()) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    const OrderedJson& schema = entry["schema"];
    auto g = small_grammar(schema);
    const std::string good = entry["documents"][0].dump(-1, ' ', false);
    for (int trial = 0; trial < 20; ++trial) {
      std::string bad = good;
      const size_t at = std::uniform_int_distribution<size_t>(0, bad.size())(rng);
      if (trial % 2) bad.erase(at, std::uniform_int_distribution<size_t>(1, 3)(rng));
      else bad.insert(at, inserts[trial % (sizeof(inserts) / sizeof(*inserts))]);
      const OrderedJson parsed = OrderedJson::parse(bad, nullptr, false);
      if (!parsed.is_discarded() && json_schema_violation(parsed, schema).empty()) continue;  // still valid
      // The first byte the grammar refuses.
      Matcher bytes(g);
      size_t offending = 0;
      while (offending < bad.size() && bytes.accept_text(bad.substr(offending, 1))) ++offending;
      const auto ids = tokenize_longest(*small_vocab(), bad);
      const size_t refused = first_refused(g, ids);
      if (offending == bad.size()) {
        EXPECT_EQ(refused, ids.size() + 1) << bad;  // every byte fits, but the document is unfinished
      } else {
        ASSERT_LT(refused, ids.size()) << bad;
        size_t start = 0;
        for (size_t i = 0; i < refused; ++i) start += small_vocab()->bytes(ids[i]).size();
        EXPECT_LE(start, offending) << bad;
        EXPECT_GT(start + small_vocab()->bytes(ids[refused]).size(), offending) << bad;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 200u);
}

TEST(JsonSchema, MaskEqualsBruteForce) {
  for (const char* name : {"any_of", "tree", "unicode", "metadata"}) {
    SCOPED_TRACE(name);
    const OrderedJson* schema = nullptr;
    for (const OrderedJson& e : corpus())
      if (e["name"] == name) schema = &e["schema"];
    auto g = small_grammar(*schema);
    std::mt19937 rng(3);
    Matcher m(g, {{kEos}});
    for (int step = 0; step < 20 && !m.is_terminated(); ++step) {
      const auto ids = allowed_ids(fast_mask(m), g->vocab().size());
      ASSERT_EQ(ids, allowed_ids(brute_mask(m), g->vocab().size())) << "step " << step;
      ASSERT_FALSE(ids.empty());
      ASSERT_TRUE(m.accept(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]));
    }
  }
}

// Random constrained generation ends in documents that validate. With K3_GRAMMAR_WALKS_OUT set,
// also writes them (one {"schema", "document"} per line) for the ajv check (tests/grammar/ajv).
TEST(JsonSchema, ConstrainedWalksValidate) {
  std::mt19937 rng(5);
  std::ofstream out;
  if (const char* path = std::getenv("K3_GRAMMAR_WALKS_OUT")) out.open(path);
  for (const OrderedJson& entry : corpus()) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    const OrderedJson& schema = entry["schema"];
    auto g = small_grammar(schema);
    for (int walk = 0; walk < 4; ++walk) {
      const auto text = constrained_walk(g, rng, 10 + 20 * walk, kEos);
      ASSERT_TRUE(text.has_value());
      const OrderedJson doc = OrderedJson::parse(*text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << *text;
      EXPECT_EQ(json_schema_violation(doc, schema), "") << *text;
      if (out) out << OrderedJson{{"name", entry["name"]}, {"schema", schema}, {"document", doc}}.dump(-1, ' ', false) << "\n";
    }
  }
}

TEST(JsonSchema, Validator) {
  const OrderedJson schema = OrderedJson::parse(R"j({"type": "object", "properties": {
      "d": {"type": "string", "format": "date"}, "n": {"type": "integer", "maximum": 3},
      "s": {"type": "string", "pattern": "^a+$", "maxLength": 3}}, "additionalProperties": false})j");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"d": "2024-02-29", "n": 3, "s": "aaa"})j"), schema), "");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"d": "2023-02-29"})j"), schema), "/d: not a valid date");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"n": 4})j"), schema), "/n: above the maximum");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"n": 2.5})j"), schema), "/n: number is not of the allowed type");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"s": "aaaa"})j"), schema), "/s: longer than maxLength");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"s": "ab"})j"), schema), "/s: does not match the pattern");
  EXPECT_EQ(json_schema_violation(OrderedJson::parse(R"j({"x": 1})j"), schema), "/x: no value is allowed");
}

TEST(JsonSchema, Cache) {
  GrammarCache cache(2, {.threads = 1});
  const auto vocab = small_vocab();
  auto a = cache.json_schema(std::string_view(R"j({"type": "integer"})j"), vocab);
  auto b = cache.json_schema(std::string_view(R"j({"type": "integer"})j"), vocab);
  EXPECT_EQ(a, b);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_NE(cache.json_schema(std::string_view(R"j({"type": "integer"})j"), vocab, {JsonWhitespace::kCompact}), a);
  cache.json_object(vocab);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.json_schema(std::string_view(R"j({"type": "integer"})j"), vocab), a);  // evicted, compiled again
  EXPECT_THROW(cache.gbnf("root ::= nope", vocab), Error);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace k3::grammar::test
