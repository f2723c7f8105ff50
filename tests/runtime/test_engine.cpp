// Engine consistency on make-tiny checkpoints (bf16, kimi-k3 and kimi-linear): prefill == step-by-
// step decode (chunked KDA + expanded MLA vs recurrent KDA + absorbed MLA over the latent cache),
// a prefill continued from cached state == one prefill, a batch of sequences of different lengths
// == each sequence alone. All paths are fp32; differences are summation order only (chunked vs
// recurrent KDA, expanded vs absorbed MLA), measured ≤ 2e-5 of the largest logit on the
// conditioned tiny K3 (see kAttnResProjScale) and ≤ 2e-6 on kimi-linear; a wrong state hand-over
// moves logits by > 1e-2.
#include <gtest/gtest.h>

#include "error_of.h"
#include "model/engine_test_util.h"
#include "runtime/generate.h"

namespace k3 {
namespace {

constexpr double kTolerance = 1e-4;

class EngineConsistency : public ::testing::TestWithParam<TinyArch> {
 protected:
  void SetUp() override {
    tiny_ = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 5);
    engine_ = std::make_unique<Engine>(tiny_.dir);
  }
  int64_t vocab() const { return engine_->config().vocab_size; }
  std::vector<float> rows(const std::vector<float>& all, int64_t from, int64_t to) const {
    return std::vector<float>(all.begin() + from * vocab(), all.begin() + to * vocab());
  }

  test::TinyCheckpoint tiny_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(EngineConsistency, PrefillEqualsStepByStepDecode) {
  // Chunk boundaries of the KDA prefill are covered by test_kda_chunked.cpp.
  const std::vector<int64_t> ids = test::test_prompt(24, vocab());
  const std::vector<float> prefill = test::prefill_logits(*engine_, ids);
  const int64_t seq = engine_->new_sequence();
  std::vector<float> decode;
  for (int64_t id : ids) {
    const StepResult r = engine_->step({{seq, {id}, false}}).front();
    decode.insert(decode.end(), r.logits.begin(), r.logits.end());
  }
  EXPECT_EQ(engine_->sequence_length(seq), 24);
  EXPECT_LT(test::relative_max_error(decode, prefill), kTolerance);
}

TEST_P(EngineConsistency, ContinuedPrefillEqualsOnePrefill) {
  const std::vector<int64_t> ids = test::test_prompt(23, vocab(), 1);
  const std::vector<float> whole = test::prefill_logits(*engine_, ids);
  const int64_t seq = engine_->new_sequence();
  const std::vector<int64_t> head(ids.begin(), ids.begin() + 2), tail(ids.begin() + 2, ids.end());
  std::vector<float> parts = engine_->step({{seq, head, true}}).front().logits;
  const std::vector<float> rest = engine_->step({{seq, tail, true}}).front().logits;
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_LT(test::relative_max_error(parts, whole), kTolerance);
}

TEST_P(EngineConsistency, BatchOfSequencesEqualsEachAlone) {
  const std::vector<int64_t> a = test::test_prompt(9, vocab(), 2), b = test::test_prompt(1, vocab(), 3),
                             c = test::test_prompt(14, vocab(), 4), d = test::test_prompt(6, vocab(), 5);
  // Alone: a, b, c as fresh prompts; d prefilled, then its next token 5 alone.
  const std::vector<float> la = test::prefill_logits(*engine_, a), lb = test::prefill_logits(*engine_, b),
                           lc = test::prefill_logits(*engine_, c);
  const int64_t d_alone = engine_->new_sequence();
  engine_->step({{d_alone, d, false}});
  const std::vector<float> ld = engine_->step({{d_alone, {5}, false}}).front().logits;
  // Together: the same three prefills and d's decode step in one call.
  const int64_t sa = engine_->new_sequence(), sb = engine_->new_sequence(), sc = engine_->new_sequence(),
                sd = engine_->new_sequence();
  engine_->step({{sd, d, false}});
  const std::vector<StepResult> out = engine_->step({{sa, a, true}, {sb, b, true}, {sd, {5}, false}, {sc, c, false}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].sequence, sa);
  EXPECT_EQ(out[2].rows, 1);
  EXPECT_LT(test::relative_max_error(out[0].logits, la), kTolerance);
  EXPECT_LT(test::relative_max_error(out[1].logits, lb), kTolerance);
  EXPECT_LT(test::relative_max_error(out[2].logits, ld), kTolerance);
  EXPECT_LT(test::relative_max_error(out[3].logits, rows(lc, 13, 14)), kTolerance);
}

TEST_P(EngineConsistency, RejectsBadInputsBeforeRunning) {
  const int64_t seq = engine_->new_sequence();
  auto message = [&](const std::vector<SequenceInput>& in) {
    try {
      engine_->step(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{seq, {vocab()}, false}}), "token id " + std::to_string(vocab()) + " is out of range [0, " + std::to_string(vocab()) + ")");
  EXPECT_EQ(message({{seq, {-1}, false}}), "token id -1 is out of range [0, " + std::to_string(vocab()) + ")");
  EXPECT_EQ(message({{seq, {}, false}}), "sequence " + std::to_string(seq) + ": no tokens to run");
  EXPECT_EQ(message({{seq, {1}, false}, {seq, {2}, false}}), "sequence " + std::to_string(seq) + " appears twice in one step");
  EXPECT_EQ(message({{seq + 100, {1}, false}}), "unknown sequence " + std::to_string(seq + 100));
  EXPECT_EQ(engine_->sequence_length(seq), 0);  // nothing ran
}

// prefill() in steps of `chunk` tokens (the state carried over) gives one prefill's logits, and
// reports its progress after each step.
TEST_P(EngineConsistency, ChunkedPrefillEqualsOnePrefill) {
  const std::vector<int64_t> ids = test::test_prompt(10, vocab(), 6);
  const std::vector<float> whole = test::prefill_logits(*engine_, ids);
  std::vector<std::pair<int64_t, int64_t>> progress;
  const int64_t seq = engine_->new_sequence();
  const StepResult r = prefill(*engine_, seq, ids, true, [&](int64_t done, int64_t total) { progress.emplace_back(done, total); }, 3);
  EXPECT_EQ(r.rows, 10);
  EXPECT_LT(test::relative_max_error(r.logits, whole), kTolerance);
  EXPECT_EQ(progress, (std::vector<std::pair<int64_t, int64_t>>{{3, 10}, {6, 10}, {9, 10}, {10, 10}}));
  const int64_t seq2 = engine_->new_sequence();
  const StepResult last = prefill(*engine_, seq2, ids, false, {}, 4);
  EXPECT_EQ(last.rows, 1);
  EXPECT_LT(test::relative_max_error(last.logits, rows(whole, 9, 10)), kTolerance);
}

// EngineOptions::max_context: no step may take a sequence past it; generate() and prefill() refuse
// an over-long request before any work.
TEST_P(EngineConsistency, ContextLimitIsEnforcedBeforeRunning) {
  EngineOptions options;
  options.max_context = 4;
  Engine engine(tiny_.dir, options);
  const int64_t seq = engine.new_sequence();
  EXPECT_EQ(test::error_of([&] { engine.step({{seq, {1, 2, 3, 4, 5}, false}}); }),
            "field 'max_context': sequence " + std::to_string(seq) + " would hold 5 tokens, over the context limit of 4");
  engine.step({{seq, {1, 2, 3}, false}});
  EXPECT_NE(test::error_of([&] { engine.step({{seq, {1, 2}, false}}); }).find("would hold 5 tokens"), std::string::npos);
  EXPECT_EQ(engine.sequence_length(seq), 3);
  GenerateOptions g;
  g.max_tokens = 2;
  EXPECT_EQ(test::error_of([&] { generate(engine, {1, 2, 3}, g); }),
            "field 'max_context': the prompt's 3 tokens plus 2 tokens to generate exceed the context limit of 4 tokens");
  const int64_t seq2 = engine.new_sequence();
  EXPECT_EQ(test::error_of([&] { prefill(engine, seq2, {1, 2, 3, 4, 5}, false); }),
            "field 'max_context': the prompt's 5 tokens exceed the context limit of 4 tokens");
  EXPECT_EQ(engine.sequence_length(seq2), 0);
}

TEST(EngineOptionsCheck, ThreadsAboveTheBoundAreRefused) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiLinear, 5);
  EngineOptions options;
  options.threads = max_engine_threads() + 1;
  EXPECT_NE(test::error_of([&] { Engine engine(tiny.dir, options); }).find("field 'threads': "), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EngineConsistency, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         [](const auto& info) { return std::string(info.param == TinyArch::KimiK3 ? "KimiK3" : "KimiLinear"); });

}  // namespace
}  // namespace k3
