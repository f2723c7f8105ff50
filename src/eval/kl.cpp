#include "eval/kl.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace k3::eval {
namespace {

// log Σ exp(row), in float64.
double log_sum_exp(std::span<const float> row) {
  double top = -INFINITY;
  for (const float v : row) top = std::max(top, static_cast<double>(v));
  double sum = 0;
  for (const float v : row) sum += std::exp(static_cast<double>(v) - top);
  return top + std::log(sum);
}

size_t argmax(std::span<const float> row) {
  return static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Logit floats held for the base's rows of one group: about 256 MiB.
constexpr size_t kGroupFloats = size_t{64} << 20;

}  // namespace

double kl_divergence(std::span<const float> base, std::span<const float> model) {
  const double lb = log_sum_exp(base), lm = log_sum_exp(model);
  double kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double log_p = static_cast<double>(base[i]) - lb;
    const double log_q = static_cast<double>(model[i]) - lm;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

void KlAccumulator::add(std::span<const float> base, std::span<const float> model, int64_t vocab) {
  const size_t v = static_cast<size_t>(vocab);
  for (size_t r = 0; r * v < base.size(); ++r) {
    const std::span<const float> b = base.subspan(r * v, v), m = model.subspan(r * v, v);
    kl_.push_back(kl_divergence(b, m));
    agree_ += argmax(b) == argmax(m);
  }
}

KlSummary KlAccumulator::summary() const {
  KlSummary s;
  s.positions = static_cast<int64_t>(kl_.size());
  if (kl_.empty()) return s;
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (const double k : sorted) sum += k;
  s.mean = sum / static_cast<double>(sorted.size());
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(sorted.size())));
  s.p99 = sorted[std::max<size_t>(rank, 1) - 1];
  s.max = sorted.back();
  s.top1_agreement = static_cast<double>(agree_) / static_cast<double>(sorted.size());
  return s;
}

void check_same_vocabulary(const K3Config& model, const Tokenizer& model_tokenizer, const K3Config& base,
                           const Tokenizer& base_tokenizer, const std::string& base_dir) {
  auto differ = [&](const std::string& file, const std::string& field, const std::string& what) {
    throw Error(Where{base_dir + "/" + file, "", field}, what + ": the base model must share the model's chat format, vocabulary and tokenizer");
  };
  if (base.model_type != model.model_type) differ("config.json", "model_type", "differs from the model's");
  if (base.vocab_size != model.vocab_size) {
    differ("config.json", "vocab_size", "is " + std::to_string(base.vocab_size) + ", the model's " + std::to_string(model.vocab_size));
  }
  if (base_tokenizer.num_base() != model_tokenizer.num_base() || base_tokenizer.n_vocab() != model_tokenizer.n_vocab()) {
    differ("tiktoken.model", "", "has " + std::to_string(base_tokenizer.num_base()) + " ordinary tokens, the model's tokenizer " +
                                     std::to_string(model_tokenizer.num_base()));
  }
  for (uint32_t id = 0; id < base_tokenizer.n_vocab(); ++id) {
    if (base_tokenizer.token_bytes(id) == model_tokenizer.token_bytes(id)) continue;
    differ(id < base_tokenizer.num_base() ? "tiktoken.model" : "tokenizer_config.json", "",
           "token " + std::to_string(id) + " differs from the model's tokenizer");
  }
}

KlSummary compare_models(Engine& base, Engine& model, std::span<const ForcedSequence> sequences,
                         const ForcingOptions& options) {
  const int64_t vocab = model.config().vocab_size;
  KlAccumulator acc;
  for (size_t first = 0; first < sequences.size();) {
    // A group whose base rows fit kGroupFloats (at least one sequence).
    size_t last = first, floats = 0;
    while (last < sequences.size() && (last == first || floats + sequences[last].reply.size() * static_cast<size_t>(vocab) <= kGroupFloats)) {
      floats += sequences[last].reply.size() * static_cast<size_t>(vocab);
      ++last;
    }
    const std::span<const ForcedSequence> group = sequences.subspan(first, last - first);
    std::vector<std::vector<float>> base_rows(group.size());
    teacher_force(base, group, options, [&](size_t i, std::span<const float> rows) { base_rows[i].assign(rows.begin(), rows.end()); });
    teacher_force(model, group, options, [&](size_t i, std::span<const float> rows) {
      acc.add(base_rows[i], rows, vocab);
      base_rows[i] = {};
    });
    first = last;
  }
  return acc.summary();
}

}  // namespace k3::eval
