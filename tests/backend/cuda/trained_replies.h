// Greedy replies of the trained tiny Kimi-K3 (models/tiny-k3) to its eval prompts, decoded in one
// continuous batch by two engines over it, for tests that check a placement of the model keeps its
// replies token for token.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eval/chat_reply.h"
#include "eval/eval.h"
#include "eval/greedy.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace k3::test {

inline const std::string kTrainedModel = std::string(K3_SOURCE_DIR) + "/models/tiny-k3";

struct TrainedReplies {
  eval::DecodeRun got, want;
  size_t prompts = 0;
};

// `n` examples per eval task, at most `max_tokens` tokens per reply; expects got's replies to equal
// want's (gtest failures naming the prompt).
inline TrainedReplies expect_same_trained_replies(Engine& got, Engine& want, int64_t n, int64_t max_tokens) {
  const Tokenizer tokenizer = Tokenizer::load(kTrainedModel);
  const eval::ChatFormat format = eval::chat_format_of(want.config());
  eval::EvalOptions options;
  options.n = n;
  std::vector<eval::DecodeJob> jobs;
  for (const eval::Example& x : eval::make_eval_examples(options)) jobs.push_back({eval::prompt_ids(tokenizer, format, x.prompt), max_tokens});
  const std::vector<int64_t> stops = eval::stop_ids(tokenizer, format, want.config());
  TrainedReplies r;
  r.prompts = jobs.size();
  r.want = eval::greedy_decode(want, jobs, stops, 4096);
  r.got = eval::greedy_decode(got, jobs, stops, 4096);
  EXPECT_EQ(r.got.replies.size(), r.want.replies.size());
  for (size_t i = 0; i < r.got.replies.size() && i < r.want.replies.size(); ++i) {
    EXPECT_EQ(r.got.replies[i], r.want.replies[i]) << "prompt " << i;
  }
  return r;
}

}  // namespace k3::test
