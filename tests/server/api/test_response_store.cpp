// The stored responses: least recently used out first, bounded by count and bytes.
#include <gtest/gtest.h>

#include "server/api/response_store.h"

namespace k3::server {
namespace {

using chat::Json;

Json items(const std::string& text) { return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", text}}}); }
// The bytes one entry counts: its id and its items' JSON text.
uint64_t cost(const std::string& id, const std::string& text) { return id.size() + chat::dump_output(items(text)).size(); }

TEST(ResponseStore, KeepsAndReturnsItems) {
  ResponseStore store(4, 1 << 20);
  EXPECT_FALSE(store.items("resp_a"));
  store.put("resp_a", items("héllo"));
  EXPECT_EQ(store.items("resp_a"), items("héllo"));
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), cost("resp_a", "héllo"));
  store.put("resp_a", items("x"));  // replaced
  EXPECT_EQ(store.items("resp_a"), items("x"));
  EXPECT_EQ(store.bytes(), cost("resp_a", "x"));
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsedByCount) {
  ResponseStore store(2, 1 << 20);
  store.put("a", items("1"));
  store.put("b", items("2"));
  EXPECT_TRUE(store.items("a"));  // now b is the least recently used
  store.put("c", items("3"));
  EXPECT_TRUE(store.items("a"));
  EXPECT_FALSE(store.items("b"));
  EXPECT_TRUE(store.items("c"));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, EvictsByBytesAndSkipsWhatCannotFit) {
  const uint64_t one = cost("a", std::string(100, 'x'));
  ResponseStore store(100, 2 * one + 10);
  store.put("a", items(std::string(100, 'x')));
  store.put("b", items(std::string(100, 'y')));
  store.put("c", items(std::string(100, 'z')));
  EXPECT_FALSE(store.items("a"));
  EXPECT_TRUE(store.items("b") && store.items("c"));
  EXPECT_LE(store.bytes(), 2 * one + 10);
  store.put("d", items(std::string(1000, 'w')));  // larger than the whole bound: not kept, nothing evicted
  EXPECT_FALSE(store.items("d"));
  EXPECT_EQ(store.size(), 2u);
  ResponseStore none(0, 1 << 20);
  none.put("a", items("1"));
  EXPECT_FALSE(none.items("a"));
}

}  // namespace
}  // namespace k3::server
