// Distribution distance between a base model and a model under test, as llama.cpp's
// `llama-perplexity --kl-divergence` reports it: over the positions that predicted the base's
// greedy replies (teacher-forced on both models, eval/teacher.h), KL(P_base || P_model) in float64
// over the full vocabulary (softmax of the float logits), its mean, 99th percentile and maximum,
// and how often both models' top token agree.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/teacher.h"
#include "model/config.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace k3::eval {

// KL(softmax(base) || softmax(model)) in float64; both rows have the same length.
double kl_divergence(std::span<const float> base, std::span<const float> model);

struct KlSummary {
  int64_t positions = 0;
  double mean = 0, p99 = 0, max = 0;  // p99: nearest rank, the ⌈0.99·positions⌉-th smallest
  double top1_agreement = 0;          // share of positions whose argmax (lowest id on ties) agree
};

class KlAccumulator {
 public:
  // Adds `rows` positions: base and model are [rows][vocab].
  void add(std::span<const float> base, std::span<const float> model, int64_t vocab);
  KlSummary summary() const;

 private:
  std::vector<double> kl_;
  int64_t agree_ = 0;
};

// Throws k3::Error naming `base_dir` unless both models have the same chat format, vocab_size and
// tokenizer (every id's bytes and special names).
void check_same_vocabulary(const K3Config& model, const Tokenizer& model_tokenizer, const K3Config& base,
                           const Tokenizer& base_tokenizer, const std::string& base_dir);

// Teacher-forces every sequence on both engines (in groups bounded in memory) and compares them.
KlSummary compare_models(Engine& base, Engine& model, std::span<const ForcedSequence> sequences,
                         const ForcingOptions& options);

}  // namespace k3::eval
