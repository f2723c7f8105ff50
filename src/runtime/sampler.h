// Next-token selection from one row of logits. Processing order: repetition penalties (presence /
// frequency, over the tokens this sampler produced or observed) → greedy argmax (lowest id on ties)
// or: temperature → top-k → top-p (nucleus) → min-p → a draw from a seeded generator
// (deterministic per seed). With no penalties and min_p = 0 the result is that of plain
// temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "backend/executor.h"
#include <unordered_map>
#include <utility>
#include <vector>

namespace k3 {

struct SamplingParams {
  bool greedy = true;
  double temperature = 1.0;  // > 0 when sampling
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // in (0, 1]
  double min_p = 0.0;        // in [0, 1]; keeps tokens with p ≥ min_p · p(best); 0 = off
  // OpenAI semantics, each in [-2, 2]: logit −= presence·[count > 0] + frequency·count, count = how
  // often the token was generated so far. Applied in greedy mode too.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  uint64_t seed = 0;
};

// Throws k3::Error naming the field for out-of-range parameters.
void validate(const SamplingParams& params);

// The log-probabilities of one step: the chosen id's and the top_n best (sorted by logprob
// descending, then id ascending).
struct TokenLogprobs {
  int64_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;
};

inline constexpr int kMaxTopLogprobs = 20;

// Log-softmax of the raw logits (before penalties and temperature), accumulated in double;
// top_n in [0, kMaxTopLogprobs] (clamped to the vocabulary).
TokenLogprobs logprobs_of(std::span<const float> logits, int64_t chosen, int top_n);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // The next id; it counts as generated for the penalties.
  // `allowed`, when given, is a bitmask over the vocabulary (bit i of word i/32: token i may come
  // next, e.g. a grammar's mask): the other tokens are never picked. Throws k3::Error when it
  // allows none.
  int64_t next(std::span<const float> logits, std::span<const uint32_t> allowed = {});
  // next() without counting the id: the caller may refuse it, and reports the id it keeps with
  // observe().
  int64_t draw(std::span<const float> logits, std::span<const uint32_t> allowed = {});
  // Counts an id the caller chose itself (a forced token, or a pick made on the device) as generated.
  void observe(int64_t id);
  // The next pick for an executor that samples where the logits are (backend/executor.h): these
  // parameters, a uniform draw from this sampler's generator and the penalties of the tokens
  // generated so far. The caller reports the pick with observe().
  RowSampling device_row();

 private:
  bool penalized() const { return params_.presence_penalty != 0 || params_.frequency_penalty != 0; }
  int64_t choose(std::span<const float> logits);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int64_t, int64_t> counts_;  // generated ids (only kept when penalized)
  std::vector<float> penalized_;                 // scratch: the penalized and masked logits
};

}  // namespace k3
