// Next-token selection from one row of logits: greedy (argmax, lowest id on ties) or sampling with
// temperature, then top-k, then top-p (nucleus), from a seeded generator (deterministic per seed).
#pragma once

#include <cstdint>
#include <random>
#include <span>

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

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int64_t next(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace k3
