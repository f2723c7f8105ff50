#include <gtest/gtest.h>

#include "core/error.h"

TEST(Error, NamesFileTensorAndField) {
  k3::Error e(k3::Where{"a.safetensors", "w", "dtype"}, "unknown dtype 'X9'");
  EXPECT_STREQ(e.what(), "a.safetensors: tensor 'w': field 'dtype': unknown dtype 'X9'");
  EXPECT_EQ(e.detail(), "unknown dtype 'X9'");
}

TEST(Error, LeavesOutEmptyParts) {
  k3::Error e(k3::Where{"c.json", "", ""}, "bad JSON");
  EXPECT_STREQ(e.what(), "c.json: bad JSON");
}

TEST(Error, QuoteBytesEscapesControlAndInvalidBytes) {
  using k3::quote_bytes;
  EXPECT_EQ(quote_bytes("plain text"), "'plain text'");
  EXPECT_EQ(quote_bytes(std::string("a\0b\n\r\t\x7f", 7)), "'a\\x00b\\x0a\\x0d\\x09\\x7f'");
  EXPECT_EQ(quote_bytes("it's a\\b"), "'it\\x27s a\\x5cb'");
  EXPECT_EQ(quote_bytes("caf\xc3\xa9 \xe4\xb8\xad"), "'caf\xc3\xa9 \xe4\xb8\xad'");  // valid UTF-8 stays
  EXPECT_EQ(quote_bytes("\xc3 \xed\xa0\x80 \xc0\xaf"), "'\\xc3 \\xed\\xa0\\x80 \\xc0\\xaf'");
  EXPECT_EQ(quote_bytes("abcdef", 3), "'abc'...");
  EXPECT_EQ(quote_bytes("ab\xe4\xb8\xad", 3), "'ab'...");  // never cuts a character
  EXPECT_EQ(quote_bytes(""), "''");
}

TEST(Error, TensorAndFieldNamesFromFilesStayOnOneLine) {
  k3::Error e(k3::Where{"m.gguf", std::string("blk.0\0\nx", 8), "a\x01" "b"}, "bad");
  EXPECT_STREQ(e.what(), "m.gguf: tensor 'blk.0\\x00\\x0ax': field 'a\\x01b': bad");
  EXPECT_EQ(e.where().tensor, std::string("blk.0\0\nx", 8));  // the raw name stays available
  k3::Error quoted(k3::Where{"", "it's", ""}, "bad");
  EXPECT_STREQ(quoted.what(), "tensor 'it's': bad");
  k3::Error longname(k3::Where{"", std::string(300, 'w'), ""}, "bad");
  EXPECT_EQ(std::string(longname.what()), "tensor '" + std::string(256, 'w') + "...': bad");
}
