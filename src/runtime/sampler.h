// Next-token selection from one row of logits: greedy (argmax, lowest id on ties) or sampling with
// temperature, then top-k, then top-p (nucleus), from a seeded generator (deterministic per seed).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace k3 {

struct SamplingParams {
  bool greedy = true;
  double temperature = 1.0;  // > 0 when sampling
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;
};

// Throws k3::Error naming the field for out-of-range parameters.
void validate(const SamplingParams& params);

// The chosen token's log-probability and the top_n most likely tokens' (log-softmax of the raw
// logits, accumulated in double; sorted by logprob, then id).
struct TokenLogprobs {
  int64_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;
};
TokenLogprobs logprobs_of(std::span<const float> logits, int64_t chosen, int top_n);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int64_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace k3
