// The task generators of docs/eval-tasks.md: FNV-1a and SplitMix64 against published values, the
// held-out rule, the form of every task's prompts and answers, and determinism. The golden examples
// come from an independent re-implementation of the draw procedure documented in eval/tasks.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "core/error.h"
#include "eval/tasks.h"

namespace k3::eval {
namespace {

std::vector<int64_t> numbers(const std::string& text) {
  std::vector<int64_t> v;
  const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it) v.push_back(std::stoll(it->str()));
  return v;
}

// Decimal without leading zeros.
bool canonical(const std::string& s) { return !s.empty() && (s == "0" || s[0] != '0'); }

TEST(EvalTasks, Fnv1a64PublishedValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(EvalTasks, SplitMix64PublishedValues) {
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(g.next(), 7960286522194355700ull);
  EXPECT_EQ(g.next(), 487617019471545679ull);
}

TEST(EvalTasks, UniformCoversItsInclusiveRange) {
  SplitMix64 g(42);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = g.uniform(3, 8);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 8);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(g.uniform(5, 5), 5);
}

TEST(EvalTasks, GoldenExamples) {
  const auto add = make_examples(Task::kAdd, 0, 2);
  EXPECT_EQ(add[0].prompt, "What is 779+8?");
  EXPECT_EQ(add[0].answer, "787");
  EXPECT_EQ(add[1].prompt, "What is 27+15?");
  const auto sort = make_examples(Task::kSort, 0, 1);
  EXPECT_EQ(sort[0].prompt, "Sort: 2 50 83 34");
  EXPECT_EQ(sort[0].answer, "2 34 50 83");
  const auto copy = make_examples(Task::kCopy, 7, 1);
  EXPECT_EQ(copy[0].prompt, "Repeat: 8z8nt6savpudm1gq4oczh041cc078ee7");
  EXPECT_EQ(copy[0].answer, "8z8nt6savpudm1gq4oczh041cc078ee7");
  const auto recall = make_examples(Task::kRecall, 7, 1);
  EXPECT_EQ(recall[0].prompt,
            "lqs=517, nbn=330, jmv=773, chw=498, zgu=609, hep=610, xgm=98, tqn=890, ldy=677, ahg=438, qqg=468, "
            "dlh=899, pbj=314, skx=465. What is nbn?");
  EXPECT_EQ(recall[0].answer, "330");
  // Candidate indices: the first held-out add example of seed 0 is candidate 30.
  EXPECT_EQ(draw_candidate(Task::kAdd, 0, 30).prompt, "What is 779+8?");
}

TEST(EvalTasks, HeldOutRuleAndFirstN) {
  for (const Task t : kAllTasks) {
    const auto ten = make_examples(t, 3, 10);
    ASSERT_EQ(ten.size(), 10u);
    // The examples are exactly the held-out candidates, in candidate order.
    size_t k = 0;
    for (uint64_t index = 0; k < ten.size(); ++index) {
      const Example c = draw_candidate(t, 3, index);
      EXPECT_EQ(held_out(c.prompt), fnv1a64(c.prompt) % 8 == 0);
      if (!held_out(c.prompt)) continue;
      EXPECT_EQ(c.prompt, ten[k].prompt);
      EXPECT_EQ(c.answer, ten[k].answer);
      EXPECT_EQ(c.task, t);
      ++k;
    }
    // Deterministic, and a prefix of a longer draw; another seed gives other examples.
    const auto four = make_examples(t, 3, 4);
    for (size_t i = 0; i < four.size(); ++i) EXPECT_EQ(four[i].prompt, ten[i].prompt);
    EXPECT_NE(make_examples(t, 4, 1)[0].prompt, ten[0].prompt);
  }
}

TEST(EvalTasks, AddForm) {
  const std::regex form("What is ([0-9]+)\\+([0-9]+)\\?");
  std::set<size_t> digits;
  for (const Example& e : make_examples(Task::kAdd, 1, 300)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(e.prompt, m, form)) << e.prompt;
    const std::string a = m[1], b = m[2];
    EXPECT_TRUE(canonical(a) && canonical(b)) << e.prompt;
    EXPECT_LE(a.size(), 5u);
    EXPECT_LE(b.size(), 5u);
    digits.insert(a.size());
    EXPECT_EQ(e.answer, std::to_string(std::stoll(a) + std::stoll(b)));
  }
  EXPECT_EQ(digits.size(), 5u);
}

TEST(EvalTasks, SortForm) {
  const std::regex form("Sort: [0-9]+( [0-9]+)*");
  for (const Example& e : make_examples(Task::kSort, 1, 300)) {
    ASSERT_TRUE(std::regex_match(e.prompt, form)) << e.prompt;
    std::vector<int64_t> v = numbers(e.prompt);
    EXPECT_GE(v.size(), 3u);
    EXPECT_LE(v.size(), 8u);
    for (const int64_t x : v) EXPECT_LE(x, 99);
    std::sort(v.begin(), v.end());
    std::string want;
    for (const int64_t x : v) {
      if (!want.empty()) want += ' ';
      want += std::to_string(x);
    }
    EXPECT_EQ(e.answer, want);
  }
}

TEST(EvalTasks, CopyForm) {
  const std::regex form("Repeat: ([a-z0-9]{4,32})");
  for (const Example& e : make_examples(Task::kCopy, 1, 300)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(e.prompt, m, form)) << e.prompt;
    EXPECT_EQ(e.answer, m[1].str());
  }
}

TEST(EvalTasks, RecallForm) {
  const std::regex pair("([a-z]{3})=([0-9]+)");
  const std::regex form("[a-z]{3}=[0-9]+(, [a-z]{3}=[0-9]+)*\\. What is ([a-z]{3})\\?");
  for (const Example& e : make_examples(Task::kRecall, 1, 300)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(e.prompt, m, form)) << e.prompt;
    const std::string query = m[2];
    std::vector<std::string> keys;
    std::string value;
    for (auto it = std::sregex_iterator(e.prompt.begin(), e.prompt.end(), pair); it != std::sregex_iterator(); ++it) {
      keys.push_back((*it)[1]);
      EXPECT_TRUE(canonical((*it)[2])) << e.prompt;
      EXPECT_LE(std::stoll((*it)[2]), 999);
      if (keys.back() == query) value = (*it)[2];
    }
    EXPECT_GE(keys.size(), 8u);
    EXPECT_LE(keys.size(), 24u);
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size()) << e.prompt;
    EXPECT_EQ(e.answer, value) << e.prompt;
  }
}

TEST(EvalTasks, ParseTasks) {
  EXPECT_EQ(parse_tasks("all").size(), 4u);
  EXPECT_EQ(parse_tasks("copy,add,copy"), (std::vector<Task>{Task::kCopy, Task::kAdd}));
  for (const std::string bad : {"bogus", "", "add,", "ADD"}) {
    try {
      parse_tasks(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.where().field, "--task");
    }
  }
}

}  // namespace
}  // namespace k3::eval
