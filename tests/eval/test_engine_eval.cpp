// The eval's engine paths on a make-tiny Kimi-K3 model: batched greedy decoding gives what
// single-sequence generation gives; teacher forcing hands back the rows that predicted a reply; a
// model compared with itself has KL 0; run_eval scores every example.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/eval.h"
#include "eval/greedy.h"
#include "runtime/generate.h"
#include "tiny_models.h"

namespace k3::eval {
namespace {

EngineOptions small_engine() {
  EngineOptions o;
  o.threads = 2;
  o.max_sequences = 8;
  o.max_context = 1024;
  return o;
}

class EvalEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::tiny_model("kimi-k3", "bf16");
    engine_ = std::make_unique<Engine>(dir_, small_engine());
    tokenizer_.emplace(Tokenizer::load(dir_));
    for (const Task t : kAllTasks) {
      const Example e = make_examples(t, 0, 1)[0];
      jobs_.push_back({prompt_ids(*tokenizer_, ChatFormat::kKimiK3, e.prompt), 12});
    }
  }
  std::string dir_;
  std::unique_ptr<Engine> engine_;
  std::optional<Tokenizer> tokenizer_;
  std::vector<DecodeJob> jobs_;
};

TEST_F(EvalEngine, BatchedGreedyEqualsSingleSequenceGeneration) {
  const std::vector<int64_t> stops = stop_ids(*tokenizer_, ChatFormat::kKimiK3, engine_->config());
  const DecodeRun run = greedy_decode(*engine_, jobs_, stops, 2048);
  ASSERT_EQ(run.replies.size(), jobs_.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    GenerateOptions g;
    g.max_tokens = jobs_[i].max_tokens;
    const GenerateResult alone = generate(*engine_, jobs_[i].prompt, g);
    EXPECT_EQ(run.replies[i], alone.ids) << "job " << i;
    tokens += static_cast<int64_t>(run.replies[i].size());
  }
  EXPECT_EQ(run.generated_tokens, tokens);
  EXPECT_EQ(engine_->live_sequences(), 0);
}

TEST_F(EvalEngine, TeacherForcingAndKlAgainstItself) {
  const DecodeRun run = greedy_decode(*engine_, jobs_, {}, 2048);  // no stop ids: every reply is 12 tokens
  std::vector<ForcedSequence> seqs;
  for (size_t i = 0; i < jobs_.size(); ++i) seqs.push_back({jobs_[i].prompt, run.replies[i]});
  const int64_t vocab = engine_->config().vocab_size;
  std::vector<int> seen(seqs.size(), 0);
  int64_t agree = 0, rows = 0;
  ForcingOptions small;
  small.max_batch_tokens = 64;  // several steps, prompts cut into pieces
  small.max_logit_rows = 16;
  teacher_force(*engine_, seqs, small, [&](size_t i, std::span<const float> logits) {
    ++seen[i];
    ASSERT_EQ(logits.size(), seqs[i].reply.size() * static_cast<size_t>(vocab));
    for (size_t r = 0; r < seqs[i].reply.size(); ++r) {
      const auto row = logits.subspan(r * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
      agree += std::max_element(row.begin(), row.end()) - row.begin() == seqs[i].reply[r];
      ++rows;
    }
  });
  EXPECT_EQ(seen, std::vector<int>(seqs.size(), 1));
  EXPECT_EQ(engine_->live_sequences(), 0);
  // The teacher-forced rows predicted the greedy reply (prefill and decode forms agree on the top token).
  EXPECT_EQ(agree, rows);
  const KlSummary self = compare_models(*engine_, *engine_, seqs, small);
  EXPECT_EQ(self.positions, rows);
  EXPECT_EQ(self.mean, 0.0);
  EXPECT_EQ(self.max, 0.0);
  EXPECT_EQ(self.top1_agreement, 1.0);
}

TEST_F(EvalEngine, RunEvalScoresEveryExample) {
  EvalOptions options;
  options.n = 2;
  options.tasks = {Task::kAdd, Task::kRecall};
  const EvalResult r = run_eval(*engine_, *tokenizer_, make_eval_examples(options), options);
  ASSERT_EQ(r.results.size(), 4u);
  ASSERT_EQ(r.scores.size(), 3u);
  EXPECT_EQ(r.scores[0].task, "add");
  EXPECT_EQ(r.scores[1].task, "recall");
  EXPECT_EQ(r.scores[2].task, "total");
  EXPECT_EQ(r.scores[2].n, 4);
  for (size_t i = 0; i < r.results.size(); ++i) {
    const ExampleResult& x = r.results[i];
    EXPECT_LE(static_cast<int64_t>(x.reply.size()), reply_token_cap(*tokenizer_, r.examples[i].answer));
    EXPECT_EQ(x.correct, x.content == r.examples[i].answer);
  }
  EXPECT_GE(r.scores[2].accuracy(), 0.0);
  EXPECT_LE(r.scores[2].accuracy(), 1.0);
}

}  // namespace
}  // namespace k3::eval
