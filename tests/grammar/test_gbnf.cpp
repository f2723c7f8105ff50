// GBNF parsing: the dialect (docs/structured-outputs.md), the text form reading back, and errors
// that give the line and column.
#include <gtest/gtest.h>

#include "error_of.h"
#include "grammar/grammar_ir.h"
#include "grammar_test_util.h"

namespace k3::grammar::test {
namespace {

std::string round_trip(const char* text) { return parse_gbnf(text).to_gbnf(); }
std::string error(const char* text) { return k3::test::error_of([&] { parse_gbnf(text); }); }

bool matches(const char* grammar, const std::string& text) {
  Matcher m(CompiledGrammar::compile(parse_gbnf(grammar), small_vocab(), {.threads = 1}));
  return m.accept_text(text) && m.can_end();
}

TEST(Gbnf, Syntax) {
  EXPECT_EQ(round_trip("root ::= \"a\" b | c*   # comment\nb ::= [x-z]+ \nc ::= \"q\"?"),
            "root ::= \"a\" b | c*\nb ::= [x-z]+\nc ::= \"q\"?\n");
  // A rule continues over lines until the next `name ::=`; inside parentheses anywhere.
  EXPECT_EQ(round_trip("root ::= \"a\"\n   \"b\" (\n \"c\" |\n \"d\" )\nx ::= \"y\""),
            "root ::= \"ab\" (\"c\" | \"d\")\nx ::= \"y\"\n");
  EXPECT_EQ(round_trip("root ::= x{3} x{2,} x{1,4} x{,2}\nx ::= \"x\""),
            "root ::= x{3} x{2,} x{1,4} x{0,2}\nx ::= \"x\"\n");
  EXPECT_EQ(round_trip(R"g(root ::= "\x41\u00e9\U0001F600\n\t\"\\" [^\]\-a] . <|open|>)g"),
            "root ::= \"A\\u00E9\\U0001F600\\n\\t\\\"\\\\\" [\\x00-,.-\\\\\\^-`b-\\U0010FFFF] [\\x00-\\U0010FFFF] <|open|>\n");
  // Text form reads back to itself.
  const char* samples[] = {
      R"g(root ::= [^"\\\x00-\x1f]* "\"" ( "a" | "b" )+ [α-ω])g",
      R"g(root ::= <|open|> x <|sep|> x{0,3} <|close|>
          x ::= [a-z0-9_-]+ | "")g",
  };
  for (const char* s : samples) EXPECT_EQ(round_trip(round_trip(s).c_str()), round_trip(s)) << s;
}

TEST(Gbnf, Semantics) {
  EXPECT_TRUE(matches(R"g(root ::= [^a-c]+)g", "xyz中"));
  EXPECT_FALSE(matches(R"g(root ::= [^a-c]+)g", "xb"));
  EXPECT_TRUE(matches(R"g(root ::= . . .)g", "é中😀"));
  EXPECT_FALSE(matches(R"g(root ::= . .)g", "é中😀"));
  EXPECT_TRUE(matches(R"g(root ::= "ab"{2,3} "c")g", "ababc"));
  EXPECT_FALSE(matches(R"g(root ::= "ab"{2,3} "c")g", "abababababc"));
  EXPECT_TRUE(matches(R"g(root ::= x*
                         x ::= "(" x* ")")g", "(()(()))()"));
  EXPECT_FALSE(matches(R"g(root ::= x*
                          x ::= "(" x* ")")g", "(()"));
}

TEST(Gbnf, Errors) {
  EXPECT_EQ(error("root ::= \"a\" b"), "grammar:1:14: undefined rule 'b'");
  EXPECT_EQ(error("root ::= \"a\"\nroot ::= \"b\""), "grammar:2:1: rule 'root' is defined twice");
  EXPECT_EQ(error("root ::= \"abc"), "grammar:1:10: unterminated string literal");
  EXPECT_EQ(error("root ::= [abc"), "grammar:1:10: unterminated character class");
  EXPECT_EQ(error("root ::= ( \"a\""), "grammar:1:10: unbalanced '('");
  EXPECT_EQ(error("root ::= \"a\" )"), "grammar:1:14: unbalanced ')'");
  EXPECT_EQ(error("root = \"a\""), "grammar:1:6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error("x ::= \"a\""), "grammar:1:1: no rule named 'root'");
  EXPECT_EQ(error("root ::= \"\\q\""), "grammar:1:11: unknown escape '\\q'");
  EXPECT_EQ(error("root ::= [z-a]"), "grammar:1:10: character class range out of order");
  EXPECT_EQ(error("root ::= \"a\"{3,2}"), "grammar:1:13: repetition {3,2}: max below min");
  EXPECT_EQ(error("root ::= \"a\"{20000}"), "grammar:1:14: repetition count above 10000");
  EXPECT_EQ(error("root ::= \"\\uD800\""), "grammar:1:11: escape is not a Unicode scalar value");
  EXPECT_EQ(error("root ::= <|open"), "grammar:1:10: unterminated special token '<|'");
  EXPECT_EQ(error("root ::= \"a\"\n  \"b\" @"), "grammar:2:7: unexpected '@'");
  EXPECT_EQ(error("root ::= [^\\x00-\\U0010FFFF]"), "grammar:1:10: character class matches no character");
}

}  // namespace
}  // namespace k3::grammar::test
