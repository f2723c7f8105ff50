// Vocabulary/config loading errors, UTF-8 handling, streaming decode, special tokens, chunking and
// round-trip properties, on the tiny deterministic vocabulary.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace k3 {
namespace {

std::string all_bytes_model() {
  std::string s;
  const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (unsigned b = 0; b < 256; ++b) {
    s += b64[b >> 2];
    s += b64[(b & 3) << 4];
    s += "== " + std::to_string(b) + "\n";
  }
  return s;
}

std::string model_error(const std::string& text) {
  try {
    parse_tiktoken_model(text, "tiktoken.model");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TiktokenModel, ParsesAndChecksEveryRule) {
  EXPECT_EQ(parse_tiktoken_model(all_bytes_model() + "\naGk= 256\n", "m").at(256), "hi");
  EXPECT_EQ(model_error(all_bytes_model() + "aGk=256\n"), "tiktoken.model: line 257: expected '<base64 bytes> <rank>'");
  EXPECT_EQ(model_error(all_bytes_model() + "aG!= 256\n"), "tiktoken.model: line 257: invalid base64 'aG!='");
  EXPECT_EQ(model_error(all_bytes_model() + "aGk= 2x\n"), "tiktoken.model: line 257: invalid rank '2x'");
  EXPECT_EQ(model_error(all_bytes_model() + "aGk= 7\n"), "tiktoken.model: line 257: duplicate rank 7 (first on line 8)");
  EXPECT_EQ(model_error(all_bytes_model() + "aGk= 300\n"),
            "tiktoken.model: line 257: rank 300 out of range: ranks must be 0..256 for 257 entries");
  EXPECT_EQ(model_error(all_bytes_model() + "YQ== 256\n"),
            "tiktoken.model: line 257: token bytes duplicate those of rank 97 (line 98)");
  std::string missing = all_bytes_model();
  missing.replace(missing.find("QQ== 65"), 7, "aGk= 65");  // 'A' replaced by "hi"
  EXPECT_EQ(model_error(missing), "tiktoken.model: single byte 0x41 has no rank (all 256 bytes are required)");
}

std::string config_error(const std::string& json) {
  try {
    parse_special_tokens(json, 1000, "tokenizer_config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(SpecialTokens, NamesFlagsAndErrors) {
  const auto specials = parse_special_tokens(
      R"({"added_tokens_decoder":{"1003":{"content":"<|open|>","special":false}},"eos_token":{"content":"<|reserved_token_1001|>"}})",
      1000, "c");
  ASSERT_EQ(specials.size(), 256u);
  EXPECT_EQ(specials[3].name, "<|open|>");
  EXPECT_FALSE(specials[3].special);
  EXPECT_EQ(specials[8].name, "<|reserved_token_1008|>");
  EXPECT_EQ(config_error(R"({"added_tokens_decoder":{"999":{"content":"x"}}})"),
            "tokenizer_config.json: field 'added_tokens_decoder.999': unknown special token id 999: special ids are 1000..1255");
  EXPECT_EQ(config_error(R"({"eos_token":"[EOS]"})"), "tokenizer_config.json: field 'eos_token': unknown special token '[EOS]'");
  EXPECT_EQ(config_error(R"({"added_tokens_decoder":{"1000":{"content":"a"},"1001":{"content":"a"}}})"),
            "tokenizer_config.json: field 'added_tokens_decoder.1001': special token name 'a' already used by id 1000");
  EXPECT_EQ(config_error(R"({"added_tokens_decoder":{"1000":{"special":true}}})"),
            "tokenizer_config.json: field 'added_tokens_decoder.1000.content': expected a non-empty string");
  EXPECT_EQ(config_error("{"), "tokenizer_config.json: invalid JSON at line 1, column 2: syntax error while parsing object "
                               "key - unexpected end of input; expected string literal");
  EXPECT_EQ(config_error("{\n\"a\": [1,\n 2,]}"), "tokenizer_config.json: invalid JSON at line 3, column 4: syntax error "
                                              "while parsing value - unexpected ']'; expected '[', '{', or a literal");
  EXPECT_EQ(config_error(std::string(100000, '[')),
            "tokenizer_config.json: field '[0][0][0][0][0][0][0][0][0][0][0][0]...': invalid JSON: nesting deeper than "
            "256 levels");
  // Names from the file are quoted with control bytes escaped.
  EXPECT_EQ(config_error(R"({"eos_token":"[E\u0000\nOS]"})"),
            "tokenizer_config.json: field 'eos_token': unknown special token '[E\\x00\\x0aOS]'");
  EXPECT_EQ(config_error(R"({"added_tokens_decoder":{"1\u0000":{"content":"x"}}})"),
            "tokenizer_config.json: field 'added_tokens_decoder': key '1\\x00' is not a token id");
}

TEST(TiktokenModel, ErrorsQuoteFileBytesEscaped) {
  // A NUL, a newline-free control byte and invalid UTF-8 in the file: the message keeps them all
  // visible on one line, and a long line is cut.
  EXPECT_EQ(model_error(all_bytes_model() + std::string("AA\0BB\x01\xff 256\n", 12)),
            "tiktoken.model: line 257: invalid base64 'AA\\x00BB\\x01\\xff'");
  EXPECT_EQ(model_error(all_bytes_model() + "aGk= 2\x7f\n"), "tiktoken.model: line 257: invalid rank '2\\x7f'");
  EXPECT_EQ(model_error(all_bytes_model() + std::string(1000, '!') + " 256\n"),
            "tiktoken.model: line 257: invalid base64 '" + std::string(64, '!') + "'...");
}

TEST(Utf8, MaximalSubpartReplacement) {
  EXPECT_EQ(utf8::replace_invalid("\xE4\xB8" "A"), "\uFFFD" "A");
  EXPECT_EQ(utf8::replace_invalid("\xFF\xFE"), "\uFFFD\uFFFD");
  EXPECT_EQ(utf8::replace_invalid("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(utf8::replace_invalid("\xE0\x80\xAF"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(utf8::replace_invalid("ok 😀"), "ok 😀");
}

class Tiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("k3_tiny_tok_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    write_tiny_tokenizer(dir_.string(), 512);
    tok_ = new Tokenizer(Tokenizer::load(dir_.string()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    std::filesystem::remove_all(dir_);
  }
  static inline std::filesystem::path dir_;
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(Tiny, VocabularyIsDeterministicAndLoads) {
  EXPECT_EQ(make_tiny_vocab(512), make_tiny_vocab(512));
  EXPECT_EQ(tok_->num_base(), 512u);
  EXPECT_EQ(tok_->n_vocab(), 768u);
  EXPECT_EQ(tok_->special_id("<|end_of_msg|>"), 514u);
  EXPECT_EQ(tok_->special_id("<|reserved_token_600|>"), 600u);
  EXPECT_FALSE(tok_->special(515).special);  // <|open|> survives skip_special
  try {
    tok_->special_id("<|nope|>");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "field 'special tokens': unknown special token '<|nope|>'");
  }
}

TEST_F(Tiny, SpecialsAllowedOrText) {
  const auto all = tok_->encode("a<|open|>b", Specials::kAll);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1], 515u);
  const auto none = tok_->encode("a<|open|>b", Specials::kNone);
  for (uint32_t id : none) EXPECT_LT(id, tok_->num_base());
  EXPECT_EQ(tok_->decode(none), "a<|open|>b");
  EXPECT_EQ(tok_->decode(all, /*skip_special=*/true), "a<|open|>b");
  EXPECT_EQ(tok_->decode(std::vector<uint32_t>{513, 97}, /*skip_special=*/true), "a");
  EXPECT_EQ(tok_->decode(all, SkipSpecial::kFlagged), "a<|open|>b");
  EXPECT_EQ(tok_->decode(all, SkipSpecial::kAll), "ab");  // every added token, markers too
  EXPECT_EQ(tok_->decode(none, SkipSpecial::kAll), "a<|open|>b");  // names spelled by ordinary tokens stay
}

TEST_F(Tiny, InvalidInputIsAnError) {
  try {
    tok_->encode("ok\xC3(", Specials::kNone);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "field 'text': invalid UTF-8 at byte offset 2");
  }
  try {
    tok_->decode(std::vector<uint32_t>{768});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "field 'ids': token id 768 out of range (n_vocab 768)");
  }
}

std::string random_utf8(std::mt19937& rng, size_t n) {
  static const std::pair<char32_t, char32_t> ranges[] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x24F}, {0x3040, 0x30FF},
                                                          {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F6FF},
                                                          {0x10000, 0x10FFFF}, {0xE000, 0xFFFD}, {0x2000, 0x206F}};
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto [lo, hi] = ranges[rng() % std::size(ranges)];
    char32_t cp = lo + rng() % (hi - lo + 1);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    utf8::append(s, cp);
  }
  return s;
}

TEST_F(Tiny, DecodeEncodeRoundTripOnRandomText) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_utf8(rng, rng() % 200);
    ASSERT_EQ(tok_->decode(tok_->encode(s, Specials::kNone)), s);
    ASSERT_EQ(tok_->decode(tok_->encode(s, Specials::kAll)), s);
  }
}

TEST_F(Tiny, StreamingDecodeEqualsFullDecode) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint32_t> ids(rng() % 40);
    for (auto& id : ids) id = rng() % 8 == 0 ? 512 + rng() % 256 : rng() % 512;  // split code points, specials
    for (SkipSpecial skip : {SkipSpecial::kNone, SkipSpecial::kFlagged, SkipSpecial::kAll}) {
      StreamDecoder stream(*tok_, skip);
      std::string out;
      for (uint32_t id : ids) {
        const std::string piece = stream.push(id);
        ASSERT_EQ(utf8::first_invalid(piece), std::string_view::npos);  // never a broken sequence
        out += piece;
      }
      out += stream.finish();
      ASSERT_EQ(out, tok_->decode(ids, skip));
    }
  }
  // A skipped special between the bytes of one character does not split it (as decode).
  std::vector<uint32_t> ids;
  for (char b : std::string("\xe4\xb8\xad")) ids.push_back(tok_->ranks().find(std::string_view(&b, 1)));
  ids.insert(ids.begin() + 1, tok_->special_id("[BOS]"));
  for (SkipSpecial skip : {SkipSpecial::kFlagged, SkipSpecial::kAll}) {
    StreamDecoder stream(*tok_, skip);
    std::string out;
    for (uint32_t id : ids) out += stream.push(id);
    out += stream.finish();
    EXPECT_EQ(out, "\xe4\xb8\xad");
    EXPECT_EQ(tok_->decode(ids, skip), "\xe4\xb8\xad");
  }
}

// Specials named as kept are decoded whatever is skipped (a chat parser's markers); unknown names
// are ignored.
TEST_F(Tiny, StreamingDecodeKeepsTheNamedSpecials) {
  const std::vector<std::string> kept = {"<|open|>", "<|end_of_msg|>", "<|no_such_token|>"};
  const std::vector<uint32_t> ids = tok_->encode("a<|open|>b<|close|>c<|end_of_msg|>[BOS]", Specials::kAll);
  for (SkipSpecial skip : {SkipSpecial::kFlagged, SkipSpecial::kAll}) {
    StreamDecoder stream(*tok_, skip, kept);
    std::string out;
    for (uint32_t id : ids) out += stream.push(id);
    out += stream.finish();
    EXPECT_EQ(out, skip == SkipSpecial::kAll ? "a<|open|>bc<|end_of_msg|>" : "a<|open|>b<|close|>c<|end_of_msg|>");
  }
}

// The O(n log n) merge for long pieces must agree with the literal tiktoken rule.
std::vector<uint32_t> naive_bpe(const RankTable& ranks, const std::string& piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const uint32_t r = ranks.find(parts[i] + parts[i + 1]);
      if (r < best) best = r, at = i;
    }
    if (best == kNoRank) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<long>(at) + 1);
  }
  std::vector<uint32_t> out;
  for (const auto& p : parts) out.push_back(ranks.find(p));
  return out;
}

TEST_F(Tiny, LongPiecesMergeLikeTheNaiveRule) {
  std::mt19937 rng(3);
  const std::string letters = "theoaniqrs";
  for (size_t n : {5u, 127u, 128u, 129u, 400u, 3000u}) {
    std::string piece;
    for (size_t i = 0; i < n; ++i) piece += letters[rng() % letters.size()];
    std::vector<uint32_t> ids;
    Bpe(make_tiny_vocab(512)).encode(piece, ids);
    EXPECT_EQ(ids, naive_bpe(tok_->ranks(), piece)) << n;
  }
}

TEST(Chunking, KimiRunAndWindowLimits) {
  const std::string text = std::string(30000, ' ') + std::string(10, 'a');
  const auto chunks = chunk_text(text, ChunkLimits::kimi());
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].size(), 25000u);
  EXPECT_EQ(chunks[1], std::string(5000, ' ') + std::string(10, 'a'));
  const std::string mixed = std::string(10, 'x') + "中文";
  const auto windows = chunk_text(mixed, ChunkLimits{4, 0});
  EXPECT_EQ(windows, (std::vector<std::string_view>{"xxxx", "xxxx", "xx中文"}));
  EXPECT_TRUE(chunk_text("", ChunkLimits::kimi()).empty());
}

}  // namespace
}  // namespace k3
