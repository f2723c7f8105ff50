// The matcher against brute force: at every step of random walks the mask equals the set of
// tokens a copy of the matcher accepts, for grammars that exercise nesting, recursion, ambiguity,
// code-point classes over split UTF-8 and special tokens.
#include <gtest/gtest.h>

#include "error_of.h"
#include "grammar_test_util.h"

namespace k3::grammar::test {
namespace {

std::shared_ptr<const CompiledGrammar> compile_text(const std::string& gbnf) {
  return CompiledGrammar::compile(parse_gbnf(gbnf), small_vocab(), {.threads = 1});
}

const char* kJsonish = R"g(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\"" ws
number ::= "-"? [0-9]+ ( "." [0-9]+ )? ws
ws     ::= [ \t\n]{0,3}
)g";

const char* kGrammars[] = {
    R"g(root ::= "{" ws "\"name\"" ws ":" ws num ws "}"
       ws ::= [ \t\n]*
       num ::= "-"? [0-9]+)g",
    kJsonish,
    R"g(root ::= [α-ω中文]+ "!" [^a-z]{2,5} . "é"?)g",
    R"g(root ::= <|open|> [a-z]+ <|sep|> ( "x" | <|close|> ) tail
       tail ::= "" | <|end_of_msg|>)g",
    R"g(root ::= ( "a" | "ab" | "abc" )* "b" "c"?)g",
    R"g(root ::= expr
       expr ::= term ( [+*] term )*
       term ::= [0-9]+ | "(" expr ")")g",
    R"g(root ::= "x"{2,4} ( "y" | "" ){1,3} "中"{0,2} "z")g",
};

void check_walks(const std::shared_ptr<const CompiledGrammar>& g, unsigned seed, int walks, int max_steps) {
  std::mt19937 rng(seed);
  const uint32_t n = g->vocab().size();
  for (int w = 0; w < walks; ++w) {
    Matcher m(g, {{kEos}});
    for (int step = 0; step < max_steps && !m.is_terminated(); ++step) {
      const auto fast = fast_mask(m);
      const auto brute = brute_mask(m);
      ASSERT_EQ(allowed_ids(fast, n), allowed_ids(brute, n)) << "walk " << w << " step " << step;
      auto ids = allowed_ids(fast, n);
      ASSERT_FALSE(ids.empty());
      // Prefer continuing; stop only sometimes.
      if (ids.size() > 1 && std::uniform_int_distribution<int>(0, 9)(rng) != 0)
        ids.erase(std::remove(ids.begin(), ids.end(), kEos), ids.end());
      const uint32_t pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(pick));
    }
  }
}

TEST(GrammarMatcher, MaskEqualsBruteForce) {
  unsigned seed = 1;
  for (const char* text : kGrammars) {
    SCOPED_TRACE(text);
    check_walks(compile_text(text), seed++, 3, 20);
  }
}

TEST(GrammarMatcher, StopOnlyWhenGrammarCanEnd) {
  auto g = compile_text(R"g(root ::= "ab" "c"?)g");
  Matcher m(g, {{kEos}});
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept(kEos));
  EXPECT_TRUE(m.accept_text("ab"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_completed());
  EXPECT_TRUE(m.accept_text("c"));
  EXPECT_TRUE(m.is_completed());
  const auto ids = allowed_ids(fast_mask(m), g->vocab().size());
  EXPECT_EQ(ids, std::vector<uint32_t>{kEos});
  EXPECT_TRUE(m.accept(kEos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept('a'));
}

TEST(GrammarMatcher, SpecialTokensOnlyByTheirId) {
  auto g = compile_text(R"g(root ::= <|open|> "a")g");
  Matcher m(g, {{kEos}});
  EXPECT_FALSE(m.accept_text("<|open|>"));  // the text is not the token
  const auto ids = allowed_ids(fast_mask(m), g->vocab().size());
  EXPECT_EQ(ids, std::vector<uint32_t>{small_special("<|open|>")});
  EXPECT_TRUE(m.accept(small_special("<|open|>")));
  EXPECT_TRUE(m.accept('a'));
  EXPECT_TRUE(m.can_end());
}

TEST(GrammarMatcher, RefusedTokenLeavesStateAndRollbackRestores) {
  auto g = compile_text(kJsonish);
  Matcher m(g, {{kEos}});
  EXPECT_TRUE(m.accept_text("{\"k\": [1, "));
  const auto before = fast_mask(m);
  EXPECT_FALSE(m.accept('}'));
  EXPECT_EQ(fast_mask(m), before);
  const auto toks = tokenize_longest(g->vocab(), "\"x\", 2]}");
  for (uint32_t t : toks) ASSERT_TRUE(m.accept(t));
  EXPECT_TRUE(m.can_end());
  m.rollback(toks.size());
  EXPECT_EQ(fast_mask(m), before);
  Matcher copy = m;
  EXPECT_TRUE(copy.accept_text("3]}"));
  EXPECT_EQ(fast_mask(m), before);
}

TEST(GrammarMatcher, SplitUtf8CodePoints) {
  auto g = compile_text(R"g(root ::= [中文] "x")g");
  Matcher m(g, {{kEos}});
  EXPECT_TRUE(m.accept_text("\xE4\xB8"));  // first two bytes of 中
  EXPECT_FALSE(Matcher(m).accept_text("\x80"));
  EXPECT_TRUE(m.accept_text("\xAD" "x"));
  EXPECT_TRUE(m.can_end());
}

// Surrogates have no UTF-8 form: any character, a negated class and a JSON string all refuse the
// bytes ED A0..BF (their 3-byte CESU encodings), and take the code points around them.
TEST(GrammarMatcher, SurrogateEncodingsAreNeverText) {
  for (const char* text : {R"g(root ::= .* "x")g", R"g(root ::= [^a]* "x")g", R"g(root ::= "\"" [^"\\]* "\"" )g"}) {
    auto g = compile_text(text);
    Matcher m(g, {{kEos}});
    if (!Matcher(m).accept_text("\xED\x9F\xBF")) ASSERT_TRUE(m.accept_text("\""));  // the string's opening quote
    EXPECT_TRUE(Matcher(m).accept_text("\xED\x9F\xBF")) << text;   // U+D7FF
    EXPECT_FALSE(Matcher(m).accept_text("\xED\xA0\x80")) << text;  // U+D800
    EXPECT_FALSE(Matcher(m).accept_text("\xED\xBF\xBF")) << text;  // U+DFFF
    EXPECT_TRUE(Matcher(m).accept_text("\xEE\x80\x80")) << text;   // U+E000
  }
}

TEST(GrammarMatcher, LongDocumentsCompactTheStackPool) {
  auto g = compile_text(kJsonish);
  Matcher m(g, {{kEos}, 4});
  EXPECT_TRUE(m.accept('['));
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.accept_text("[1.5, \"ab\\n\"], "));
  EXPECT_TRUE(m.accept_text("[]]"));
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(m.rollback_depth(), 4u);
  m.rollback(4);
  EXPECT_TRUE(m.accept_text("2]"));
  EXPECT_TRUE(m.can_end());
}

TEST(GrammarMatcher, Errors) {
  auto g = compile_text(R"g(root ::= "a")g");
  EXPECT_EQ(k3::test::error_of([&] { Matcher(g, {{999999}}); }),
            "grammar matcher: stop token id 999999 is outside the vocabulary");
  Matcher m(g);
  std::vector<uint32_t> small(1);
  EXPECT_NE(k3::test::error_of([&] { m.fill_mask(small); }).find("words given"), std::string::npos);
  EXPECT_EQ(k3::test::error_of([&] { m.rollback(1); }), "grammar matcher: cannot roll back 1 tokens, 0 kept");
  EXPECT_EQ(k3::test::error_of([] { compile_text("root ::= <|nope|>"); }), "grammar: unknown special token '<|nope|>'");
  EXPECT_EQ(k3::test::error_of([] { compile_text("root ::= root \"a\" | \"b\""); }), "grammar rule 'root' is left-recursive");
  EXPECT_EQ(k3::test::error_of([] { compile_text("root ::= \"a\" x\nx ::= \"b\" x"); }),
            "grammar rule 'x' can never finish");
}

}  // namespace
}  // namespace k3::grammar::test
