// A RequestSink for scheduler tests: records the tokens, logprobs, finish and cached prompt tokens
// of one request; with stop_after ≥ 0 it ends the request after that many tokens.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/scheduler.h"

namespace k3::test {

struct Collected {
  std::vector<int64_t> ids;
  std::vector<TokenLogprobs> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
  int64_t cached = -1;
};

class Collector final : public RequestSink {
 public:
  explicit Collector(Collected& out, int64_t stop_after = -1) : out_(out), stop_after_(stop_after) {}
  void on_admitted(int64_t cached) override { out_.cached = cached; }
  bool on_token(const GeneratedToken& t) override {
    out_.ids.push_back(t.id);
    if (t.logprobs) out_.logprobs.push_back(*t.logprobs);
    return stop_after_ < 0 || static_cast<int64_t>(out_.ids.size()) < stop_after_;
  }
  void on_finish(FinishReason reason, const std::string& error) override {
    out_.finish = reason;
    out_.error = error;
  }

 private:
  Collected& out_;
  int64_t stop_after_;
};

}  // namespace k3::test
