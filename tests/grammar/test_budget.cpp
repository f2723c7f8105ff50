// A grammar constraint keeps its reply inside max_tokens: for every schema of schemas.json and
// budgets from the fewest tokens a reply needs upwards, sampling from random logits through
// sample_within_budget always ends with the stop id within the budget, on a document that
// validates; generous budgets never steer, tight ones do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "runtime/grammar_constraint.h"
#include "runtime/sampler.h"

namespace k3::grammar::test {
namespace {

std::vector<OrderedJson> schemas() {
  std::ifstream in(std::filesystem::path(K3_SOURCE_DIR) / "tests/grammar/schemas.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return OrderedJson::parse(ss.str()).get<std::vector<OrderedJson>>();
}

struct Reply {
  std::string text;
  size_t tokens = 0;
  bool stopped = false;
  bool steered = false;
};

// Samples one reply of at most `budget` tokens from random logits (a stand-in for a model that
// ignores the format), as the serving loop does.
Reply sample_reply(const CompiledGrammarPtr& g, int64_t budget, uint64_t seed) {
  GrammarConstraint c(g, {kEos});
  SamplingParams p;
  p.greedy = false;
  p.seed = seed;
  Sampler sampler(p);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> logit(0.f, 2.f);
  const TokenVocabulary& vocab = g->vocab();
  std::vector<float> logits(vocab.size());
  std::vector<uint32_t> allowed;
  Reply r;
  for (int64_t left = budget; left > 0; --left) {
    for (float& l : logits) l = logit(rng);
    allowed.assign((vocab.size() + 31) / 32, 0u);
    c.allowed_tokens(allowed, left);
    const int64_t id = sample_within_budget(sampler, logits, allowed, c, left);
    c.accept(id);
    ++r.tokens;
    if (id == kEos) {
      r.stopped = true;
      break;
    }
    r.text += vocab.bytes(static_cast<uint32_t>(id));
  }
  r.steered = c.budget_steered();
  return r;
}

TEST(BudgetedGrammar, EveryReplyEndsCompleteWithinItsBudget) {
  size_t replies = 0, steered = 0;
  for (const OrderedJson& entry : schemas()) {
    const std::string name = entry["name"].get<std::string>();
    const CompiledGrammarPtr g = compile_json_schema(entry["schema"], small_vocab(), {}, {.threads = 1});
    const int64_t needed = GrammarConstraint(g, {kEos}).tokens_needed();
    ASSERT_GE(needed, 2) << name;
    for (const int64_t extra : {0, 1, 3, 10, 40}) {
      for (uint64_t seed = 0; seed < 3; ++seed) {
        const int64_t budget = needed + extra;
        const Reply r = sample_reply(g, budget, seed * 131 + static_cast<uint64_t>(extra));
        const std::string where = name + " budget " + std::to_string(budget) + " seed " + std::to_string(seed);
        ASSERT_TRUE(r.stopped) << where << ": " << r.text;
        EXPECT_LE(r.tokens, static_cast<size_t>(budget)) << where;
        const OrderedJson doc = OrderedJson::parse(r.text, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << where << ": " << r.text;
        EXPECT_EQ(json_schema_violation(doc, entry["schema"]), "") << where << ": " << r.text;
        ++replies;
        steered += r.steered;
      }
    }
  }
  EXPECT_EQ(replies, 20u * 5 * 3);
  EXPECT_GT(steered, 0u);
}

TEST(BudgetedGrammar, AGenerousBudgetNeverSteers) {
  const CompiledGrammarPtr g =
      compile_json_schema(OrderedJson::parse(R"j({"enum": ["yes", "no"]})j"), small_vocab(), {}, {.threads = 1});
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const Reply r = sample_reply(g, 64, seed);
    EXPECT_TRUE(r.stopped);
    EXPECT_FALSE(r.steered) << r.text;
  }
}

TEST(BudgetedGrammar, TokensNeededIsTheShortestReplyPlusTheStop) {
  const CompiledGrammarPtr g =
      compile_json_schema(OrderedJson::parse(R"j({"enum": ["yes", "no"]})j"), small_vocab(), {}, {.threads = 1});
  GrammarConstraint c(g, {kEos});
  EXPECT_EQ(c.tokens_needed(), 5);  // "no" with its quotes, then the stop
  // At exactly that budget only the shortest reply fits.
  const Reply r = sample_reply(g, 5, 1);
  EXPECT_EQ(r.text, "\"no\"");
  EXPECT_TRUE(r.steered);
}

}  // namespace
}  // namespace k3::grammar::test
