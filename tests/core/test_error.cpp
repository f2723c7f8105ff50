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
