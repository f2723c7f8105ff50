// KL(P_base || P_model) of single rows against closed forms, the summary statistics, and the check
// that a base shares the model's vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "eval/kl.h"
#include "model/tiny_config.h"
#include "tokenizer/tiny_vocab.h"

namespace k3::eval {
namespace {

TEST(EvalKl, ClosedForms) {
  const std::vector<float> same = {0.5f, -2.0f, 3.0f, 1.0f};
  EXPECT_EQ(kl_divergence(same, same), 0.0);
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = ½ ln 2 + ½ ln(2/3) = ½ ln(4/3).
  const std::vector<float> base = {0.0f, 0.0f}, model = {0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(kl_divergence(base, model), 0.5 * std::log(4.0 / 3.0), 1e-7);
  // Softmax is shift-invariant; KL is not symmetric.
  const std::vector<float> shifted = {100.0f, 100.0f + static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(kl_divergence(base, shifted), 0.5 * std::log(4.0 / 3.0), 1e-5);
  EXPECT_NEAR(kl_divergence(model, base), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  // Large logits stay finite (float64 log-sum-exp).
  const std::vector<float> big = {1000.0f, -1000.0f}, big2 = {-1000.0f, 1000.0f};
  EXPECT_NEAR(kl_divergence(big, big2), 2000.0, 1e-6);
}

TEST(EvalKl, SummaryStatistics) {
  KlAccumulator acc;
  // 100 positions of vocab 2: position i has model logits (0, x_i) against base (0, 0); the base's
  // argmax is id 0 and the model's id 1 whenever x_i > 0.
  std::vector<double> kls;
  for (int i = 0; i < 100; ++i) {
    const float x = static_cast<float>(i - 10) / 10.0f;
    const std::vector<float> base = {0.0f, 0.0f}, model = {0.0f, x};
    acc.add(base, model, 2);
    kls.push_back(kl_divergence(base, model));
  }
  const KlSummary s = acc.summary();
  EXPECT_EQ(s.positions, 100);
  double sum = 0;
  for (const double k : kls) sum += k;
  EXPECT_NEAR(s.mean, sum / 100, 1e-12);
  std::sort(kls.begin(), kls.end());
  EXPECT_EQ(s.p99, kls[98]);  // nearest rank: the 99th smallest
  EXPECT_EQ(s.max, kls[99]);
  EXPECT_DOUBLE_EQ(s.top1_agreement, 0.11);  // x ≤ 0 for i ≤ 10 (ties go to the lowest id)
  EXPECT_EQ(KlAccumulator().summary().positions, 0);
}

TEST(EvalKl, SeveralRowsAtOnce) {
  KlAccumulator one, rows;
  const std::vector<float> base = {0, 1, 2, 3, 4, 5}, model = {0, 2, 1, 5, 4, 6};
  rows.add(base, model, 3);
  one.add(std::span(base).first(3), std::span(model).first(3), 3);
  one.add(std::span(base).last(3), std::span(model).last(3), 3);
  EXPECT_EQ(rows.summary().positions, 2);
  EXPECT_EQ(rows.summary().mean, one.summary().mean);
  EXPECT_DOUBLE_EQ(rows.summary().top1_agreement, 0.5);
}

struct Side {
  K3Config config;
  Tokenizer tokenizer;
};

Side side(TinyArch arch, uint32_t ordinary, const std::string& name) {
  K3Config config = parse_k3_config(parse_json(tiny_config_json(arch, TinySize::Tiny).dump(), "config.json"));
  config.vocab_size = ordinary + Tokenizer::kNumSpecials;
  const std::string dir = ::testing::TempDir() + "/k3_eval_kl_" + name;
  std::filesystem::create_directories(dir);
  write_tiny_tokenizer(dir, ordinary);
  return {config, Tokenizer::load(dir)};
}

std::string field_of_mismatch(const Side& model, const Side& base) {
  try {
    check_same_vocabulary(model.config, model.tokenizer, base.config, base.tokenizer, "BASE");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_TRUE(e.where().file.starts_with("BASE/")) << e.what();
    return e.where().field.empty() ? e.where().file : e.where().field;
  }
  return "";
}

TEST(EvalKl, BaseMustShareTheVocabulary) {
  const Side model = side(TinyArch::KimiK3, 300, "a");
  EXPECT_EQ(field_of_mismatch(model, side(TinyArch::KimiK3, 300, "b")), "");
  EXPECT_EQ(field_of_mismatch(model, side(TinyArch::KimiLinear, 300, "c")), "model_type");
  EXPECT_EQ(field_of_mismatch(model, side(TinyArch::KimiK3, 310, "d")), "vocab_size");
  // Same sizes, other tokens: a tokenizer with fewer merges padded by the config to the same size.
  Side fewer = side(TinyArch::KimiK3, 290, "e");
  fewer.config.vocab_size = model.config.vocab_size;
  EXPECT_EQ(field_of_mismatch(model, fewer), "BASE/tiktoken.model");
}

}  // namespace
}  // namespace k3::eval
