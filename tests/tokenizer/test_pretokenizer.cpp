// Kimi pre-tokenizer splits against the goldens of the tokenizer spec §2.4 (tiktoken oracle).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace k3 {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(const std::string& text) {
  static const Pretokenizer kimi(kimi_pattern());
  Pieces out;
  for (auto p : kimi.split(text)) out.emplace_back(p);
  return out;
}

TEST(KimiPretokenizer, CamelCaseAndCaps) {
  EXPECT_EQ(split("getUserName iPhone"), (Pieces{"get", "User", "Name", " i", "Phone"}));
  EXPECT_EQ(split("XMLHttpRequest parseJSON"), (Pieces{"XMLHttp", "Request", " parse", "JSON"}));
  EXPECT_EQ(split("HELLOWorld"), (Pieces{"HELLOWorld"}));
}

TEST(KimiPretokenizer, HanRunsAndCjkPunctuation) {
  EXPECT_EQ(split("中文English混合"), (Pieces{"中文", "English", "混合"}));
  EXPECT_EQ(split("中文。你好、世界「引用」"), (Pieces{"中文", "。", "你好", "、", "世界", "「", "引用", "」"}));
  EXPECT_EQ(split("日本語のテキストとカタカナ"), (Pieces{"日本語", "のテキストとカタカナ"}));
  // Script=Han, not Script_Extensions: 々 U+3005 and 〇 U+3007 are Han, 〆 U+3006 is not.
  EXPECT_EQ(split("\u2e80\u3005\u3006\u3007"), (Pieces{"\u2e80\u3005", "\u3006", "\u3007"}));
}

TEST(KimiPretokenizer, Contractions) {
  EXPECT_EQ(split("I'm can't WE'LL they'RE"), (Pieces{"I'm", " can't", " WE'LL", " they'RE"}));
  EXPECT_EQ(split("it'ſ"), (Pieces{"it'ſ"}));
  EXPECT_EQ(split("don't’s"), (Pieces{"don't", "’s"}));
}

TEST(KimiPretokenizer, Numbers) {
  EXPECT_EQ(split("1234567 89"), (Pieces{"123", "456", "7", " ", "89"}));
  EXPECT_EQ(split("x=3.14159"), (Pieces{"x", "=", "3", ".", "141", "59"}));
  EXPECT_EQ(split("１２３４５"), (Pieces{"１２３", "４５"}));
  EXPECT_EQ(split("Ⅻ²٣4"), (Pieces{"Ⅻ²٣", "4"}));
}

TEST(KimiPretokenizer, WhitespaceAndNewlines) {
  EXPECT_EQ(split("Hello world!!!\n\n  foo"), (Pieces{"Hello", " world", "!!!\n\n", " ", " foo"}));
  EXPECT_EQ(split("  leading"), (Pieces{" ", " leading"}));
  EXPECT_EQ(split("trailing   "), (Pieces{"trailing", "   "}));
  EXPECT_EQ(split("a\r\nb\r\n\r\n c"), (Pieces{"a", "\r\n", "b", "\r\n\r\n", " c"}));
  EXPECT_EQ(split("x   \n  y"), (Pieces{"x", "   \n", " ", " y"}));
  EXPECT_EQ(split("\t\tindent\n"), (Pieces{"\t", "\tindent", "\n"}));
  EXPECT_EQ(split("path/to/file.py"), (Pieces{"path", "/to", "/file", ".py"}));
  EXPECT_EQ(split("x\u0085y\u00a0z\u3000w"), (Pieces{"x", "\u0085y", "\u00a0z", "\u3000w"}));
  EXPECT_EQ(split("a\ufeffb"), (Pieces{"a", "\ufeffb"}));
  EXPECT_EQ(split("a\x1c" "b"), (Pieces{"a", "\x1c" "b"}));
}

TEST(KimiPretokenizer, EmojiAndMarkersAsText) {
  EXPECT_EQ(split("emoji 😀👍🏽 done"), (Pieces{"emoji", " 😀👍🏽", " done"}));
  EXPECT_EQ(split("<|open|>think<|sep|>"), (Pieces{"<|", "open", "|>", "think", "<|", "sep", "|>"}));
}

TEST(KimiPretokenizer, EmptyTextHasNoPieces) { EXPECT_TRUE(split("").empty()); }

TEST(KimiPretokenizer, LongRunsDoNotExhaustTheJitStack) {
  const std::string spaces(300000, ' ');
  EXPECT_EQ(split("a" + spaces + "b"), (Pieces{"a", std::string(299999, ' '), " b"}));
  const std::string letters(300000, 'q');
  EXPECT_EQ(split(letters), (Pieces{letters}));
}

// \s is exactly Unicode White_Space (spec §2.3): every White_Space code point splits as
// whitespace, and every other Zs/Cf code point (U+180E among them) as punctuation, in contexts
// where the two differ ("  X", "X  b", " \u2028X") and in plain ones.
std::string utf8_of(char32_t c) {
  std::string s;
  utf8::append(s, c);
  return s;
}

struct Range {
  char32_t first, last;
};
// White_Space (PropList.txt).
const std::vector<Range> kWhiteSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},
                                        {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                        {0x205F, 0x205F}, {0x3000, 0x3000}};
// General_Category Zs (all White_Space) and Cf (Unicode 15; none White_Space).
const std::vector<Range> kZs = {{0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                                {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
const std::vector<Range> kCf = {{0xAD, 0xAD},       {0x600, 0x605},     {0x61C, 0x61C},     {0x6DD, 0x6DD},
                                {0x70F, 0x70F},     {0x890, 0x891},     {0x8E2, 0x8E2},     {0x180E, 0x180E},
                                {0x200B, 0x200F},   {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},
                                {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
                                {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
                                {0xE0020, 0xE007F}};

bool is_white_space(char32_t c) {
  for (const Range& r : kWhiteSpace)
    if (c >= r.first && c <= r.last) return true;
  return false;
}

TEST(KimiPretokenizer, WhiteSpaceIsExactlyTheUnicodeProperty) {
  size_t checked = 0;
  for (const auto* table : {&kWhiteSpace, &kZs, &kCf}) {
    for (const Range& r : *table) {
      for (char32_t c = r.first; c <= r.last; ++c) {
        if (c == '\n' || c == '\r') continue;  // line breaks have their own branches
        const std::string x = utf8_of(c);
        const std::string ls = "\u2028";
        const bool ws = is_white_space(c);
        SCOPED_TRACE(::testing::Message() << "U+" << std::hex << static_cast<uint32_t>(c));
        EXPECT_EQ(split(" " + x), (Pieces{" " + x}));
        EXPECT_EQ(split("a " + x + " b"), (Pieces{"a", " " + x, " b"}));
        EXPECT_EQ(split(x + "\n"), (Pieces{x + "\n"}));
        EXPECT_EQ(split("  " + x), (ws ? Pieces{"  " + x} : Pieces{" ", " " + x}));
        EXPECT_EQ(split(x + "  b"), (ws ? Pieces{x + " ", " b"} : Pieces{x, " ", " b"}));
        EXPECT_EQ(split(" " + ls + x), (ws ? Pieces{" " + ls + x} : Pieces{" ", ls, x}));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200u);
}

TEST(Pretokenizer, BadPatternNamesTheOffset) {
  try {
    Pretokenizer p("ab(c");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "field 'pattern': PCRE2 rejects the pre-tokenizer pattern at offset 4: missing closing parenthesis");
  }
}

}  // namespace
}  // namespace k3
