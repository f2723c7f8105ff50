// Sample checkpoints (family_writer.h write_family_sample + alias_template_experts): every family
// that has one writes all its tensors but the routed experts past the templates, bit for bit what
// write_family writes from the same source; the aliased plan reads expert e as expert
// e % templates; the skipped experts stay holes. Units produced concurrently write the same bytes,
// and the first unit that fails is the one reported. Also SeededSource: deterministic, and
// make_master's laws (the per-row streams are its own), but routers that route as asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "error_of.h"
#include "family_test_util.h"
#include "quant/families/family_writer.h"
#include "quant/families/float_source.h"
#include "quant/plan/plan_files.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

constexpr int64_t kTemplates = 2;

std::filesystem::path temp_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(SampleCheckpoint, EveryFamilyWritesAllButTheSkippedExpertsAndAliasesThem) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Tiny);
  const K3Config config = parse_k3_config(parse_json(doc.dump(), "tiny config.json"));
  const SeededSource source(config, 11);
  for (FamilyId family : all_families()) {
    if (family == FamilyId::GgufExpertPack) continue;  // refused below
    SCOPED_TRACE(family_name(family));
    const std::string full = temp_dir(std::string("full_") + family_name(family)).string();
    const std::string sample = temp_dir(std::string("sample_") + family_name(family)).string();
    write_family(family, source, doc, full);
    write_family_sample(family, source, doc, sample, kTemplates);
    const LoadPlan full_plan = plan_checkpoint(full);
    LoadPlan plan = plan_checkpoint(sample);
    ASSERT_TRUE(plan.ok()) << test::problems_text(plan);
    ASSERT_EQ(plan.bindings.size(), full_plan.bindings.size());
    PlanFiles full_files(full_plan);
    {
      // Before aliasing the skipped experts read as zeros (holes): the sample wrote only templates.
      PlanFiles files(plan);
      for (size_t i = 0; i < plan.params.size(); ++i) {
        const ParamSpec& spec = plan.params[i];
        if (spec.kind != ParamKind::ExpertBank) continue;
        const std::vector<float> last = materialize_expert(plan.bindings[i], spec, files, static_cast<int64_t>(spec.shape[0]) - 1);
        EXPECT_TRUE(std::all_of(last.begin(), last.end(), [](float v) { return v == 0.0f; })) << spec.name;
      }
    }
    alias_template_experts(plan, kTemplates);
    PlanFiles files(plan);
    int banks = 0;
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const ParamSpec& spec = plan.params[i];
      if (full_plan.index_of(spec.name) < 0) continue;  // folded into another parameter by the family
      const Binding& full_b = full_plan.bindings[static_cast<size_t>(full_plan.index_of(spec.name))];
      if (spec.kind != ParamKind::ExpertBank) {
        EXPECT_EQ(materialize(plan.bindings[i], spec, files), materialize(full_b, spec, full_files)) << spec.name;
        continue;
      }
      ++banks;
      for (int64_t e = 0; e < static_cast<int64_t>(spec.shape[0]); ++e) {
        const std::vector<float> got = materialize_expert(plan.bindings[i], spec, files, e);
        EXPECT_EQ(got, materialize_expert(full_b, spec, full_files, e % kTemplates)) << spec.name << " expert " << e;
        if (e < kTemplates) {
          EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v != 0.0f; })) << spec.name << " expert " << e;
        }
      }
    }
    EXPECT_GT(banks, 0);
  }
}

TEST(SampleCheckpoint, RefusesFamiliesCutFromWrittenPayloads) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Tiny);
  const SeededSource source(parse_k3_config(parse_json(doc.dump(), "tiny config.json")), 11);
  const std::string dir = temp_dir("sample_pack").string();
  const std::string err = test::error_of([&] { write_family_sample(FamilyId::GgufExpertPack, source, doc, dir, kTemplates); });
  EXPECT_NE(err.find("cannot be written"), std::string::npos) << err;
  EXPECT_NE(test::error_of([&] { write_family_sample(FamilyId::Bf16, source, doc, dir, 0); }).find("at least 1"),
            std::string::npos);
}

// Every file under `dir`, by relative name, with its bytes.
std::map<std::string, std::string> folder_files(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) out[std::filesystem::relative(entry.path(), dir).string()] = test::slurp(entry.path().string());
  }
  return out;
}

TEST(ConcurrentUnits, WriteTheFilesOneAtATimeWrites) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Tiny);
  const SeededSource source(parse_k3_config(parse_json(doc.dump(), "tiny config.json")), 13);
  for (FamilyId family : all_families()) {
    SCOPED_TRACE(family_name(family));
    const std::filesystem::path one = temp_dir(std::string("one_") + family_name(family));
    write_family(family, source, doc, one.string(), QuantizeOptions{});
    const auto expected = folder_files(one);
    // Side by side only, then with the units of 4 KiB and more first, each alone.
    for (const uint64_t alone : {uint64_t{1} << 40, uint64_t{4096}}) {
      SCOPED_TRACE(alone);
      const std::filesystem::path many = temp_dir(std::string("many_") + family_name(family));
      QuantizeOptions options;
      options.concurrent_units = 3;
      options.alone_unit_bytes = alone;
      std::vector<size_t> reported;  // from the calling thread, each unit once
      options.progress = [&](const UnitDone& u) { reported.push_back(u.index); };
      write_family(family, source, doc, many.string(), options);
      ASSERT_FALSE(reported.empty());
      if (alone > 4096) EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end()));
      std::sort(reported.begin(), reported.end());
      EXPECT_EQ(std::adjacent_find(reported.begin(), reported.end()), reported.end());
      EXPECT_EQ(reported.size(), reported.back());
      const auto got = folder_files(many);
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [name, bytes] : expected) {
        ASSERT_TRUE(got.contains(name)) << name;
        EXPECT_TRUE(got.at(name) == bytes) << name;
      }
    }
  }
}

// SeededSource but for one parameter, whose read throws.
class FailingSource final : public FloatSource {
 public:
  FailingSource(const FloatSource& inner, std::string failing) : inner_(inner), failing_(std::move(failing)) {}
  const K3Config& config() const override { return inner_.config(); }
  const std::vector<ParamSpec>& params() const override { return inner_.params(); }
  std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const override {
    if (spec.name == failing_) throw Error(Where{"", spec.name, ""}, "cannot be read");
    return inner_.read(spec, expert);
  }

 private:
  const FloatSource& inner_;
  std::string failing_;
};

TEST(ConcurrentUnits, TheFailingUnitIsReportedAndTheOthersStop) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Tiny);
  const SeededSource seeded(parse_k3_config(parse_json(doc.dump(), "tiny config.json")), 13);
  for (const size_t at : {size_t{0}, seeded.params().size() / 2, seeded.params().size() - 1}) {
    const std::string failing = seeded.params()[at].name;
    const FailingSource source(seeded, failing);
    QuantizeOptions options;
    options.concurrent_units = 4;
    const std::string err =
        test::error_of([&] { write_family(FamilyId::ModelOptMixed, source, doc, temp_dir("failing").string(), options); });
    EXPECT_NE(err.find(failing), std::string::npos) << err;
    EXPECT_NE(err.find("cannot be read"), std::string::npos) << err;
  }
}

TEST(SeededSource, DeterministicPerExpertAndShapedLikeTheMaster) {
  const K3Config config = parse_k3_config(parse_json(tiny_config_json(TinyArch::KimiK3, TinySize::Tiny).dump(), "tiny"));
  const SeededSource a(config, 5), b(config, 5), c(config, 6);
  for (const ParamSpec& spec : a.params()) {
    SCOPED_TRACE(spec.name);
    const std::vector<float> v = a.read(spec);
    ASSERT_EQ(v.size(), spec.numel());
    EXPECT_EQ(v, b.read(spec));
    if (spec.numel() > 16) EXPECT_NE(v, c.read(spec));
    for (float x : v) ASSERT_TRUE(std::isfinite(x));
    if (spec.kind == ParamKind::ExpertBank) {  // an expert's read is that expert's rows of the whole bank
      const size_t per = spec.shape[1] * spec.shape[2];
      const std::vector<float> last = a.read(spec, static_cast<int64_t>(spec.shape[0]) - 1);
      EXPECT_TRUE(std::equal(last.begin(), last.end(), v.end() - static_cast<std::ptrdiff_t>(per)));
    }
    if (spec.kind == ParamKind::Linear && spec.shape[0] >= 64) {  // rows of variance ~ 1/K (make_master's law)
      double sq = 0;
      for (float x : v) sq += static_cast<double>(x) * x;
      const double k = static_cast<double>(spec.shape.back()), var = sq / static_cast<double>(v.size());
      EXPECT_GT(var * k, 0.3);
      EXPECT_LT(var * k, 3.0);
    }
  }
}

// Uniform routing: the router's rows all have variance 1/K and the correction bias is zero, so over
// random unit-RMS inputs every expert takes about its k/E share of the picks; zipf:S: the bias is
// skewed_correction_bias's fit, the router rows unchanged.
TEST(SeededSource, RoutersRouteAsAsked) {
  const K3Config config = parse_k3_config(parse_json(tiny_config_json(TinyArch::KimiK3, TinySize::Small).dump(), "small"));
  const int64_t E = config.moe->num_experts, k = config.moe->experts_per_token, H = config.hidden_size;
  const SeededSource uniform(config, 5), skewed(config, 5, parse_routing_skew("zipf:1.5"));
  const ParamSpec& gate = uniform.spec(layer_prefix(1) + "block_sparse_moe.gate.weight");
  const ParamSpec& bias = uniform.spec(layer_prefix(1) + "block_sparse_moe.gate.e_score_correction_bias");
  EXPECT_EQ(uniform.read(bias), std::vector<float>(static_cast<size_t>(E), 0.0f));
  EXPECT_EQ(skewed.read(bias), skewed_correction_bias(E, k, parse_routing_skew("zipf:1.5"), 5));
  const std::vector<float> w = uniform.read(gate);
  EXPECT_EQ(w, skewed.read(gate));

  constexpr int kTokens = 4000;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int64_t> picks(static_cast<size_t>(E), 0);
  std::vector<float> x(static_cast<size_t>(H));
  std::vector<std::pair<double, int64_t>> score(static_cast<size_t>(E));
  for (int t = 0; t < kTokens; ++t) {
    for (float& v : x) v = normal(rng);
    for (int64_t e = 0; e < E; ++e) {
      double logit = 0;
      for (int64_t i = 0; i < H; ++i) logit += static_cast<double>(w[static_cast<size_t>(e * H + i)]) * x[static_cast<size_t>(i)];
      score[static_cast<size_t>(e)] = {logit, e};
    }
    std::partial_sort(score.begin(), score.begin() + k, score.end(), std::greater<>());
    for (int64_t j = 0; j < k; ++j) ++picks[static_cast<size_t>(score[static_cast<size_t>(j)].second)];
  }
  const double fair = static_cast<double>(kTokens * k) / static_cast<double>(E);
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_GT(static_cast<double>(picks[static_cast<size_t>(e)]), 0.75 * fair) << "expert " << e;
    EXPECT_LT(static_cast<double>(picks[static_cast<size_t>(e)]), 1.25 * fair) << "expert " << e;
  }
}

}  // namespace
}  // namespace k3
