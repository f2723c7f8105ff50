// Expert placement from a routing histogram (parallel/expert_placement.h): every expert held, slots
// respected, the busiest rank's load below the contiguous split's on skewed traffic; histograms
// saved, loaded and refused when malformed; and engines whose experts are placed (hot experts on
// several ranks) give the one-rank logits bit for bit.
#include "parallel/expert_placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "model/engine_test_util.h"
#include "parallel/sharding.h"
#include "runtime/generate.h"

namespace k3 {
namespace {

// Zipf-like counts: expert e gets about 1000 / (1 + (e·7 mod E))^skew picks.
RoutingHistogram skewed(int64_t experts, std::initializer_list<int64_t> layers, double skew) {
  RoutingHistogram h;
  h.experts = experts;
  for (int64_t layer : layers) {
    std::vector<uint64_t>& c = h.layers[layer];
    for (int64_t e = 0; e < experts; ++e) c.push_back(static_cast<uint64_t>(1000.0 / std::pow(1.0 + static_cast<double>((e * 7 + layer) % experts), skew)));
  }
  return h;
}

TEST(ExpertPlacement, HoldsEveryExpertWithinTheSlotsAndBalancesSkewedTraffic) {
  for (int64_t experts : {4, 8, 13, 64}) {
    for (int ranks : {2, 3, 4, 8}) {
      for (int redundant : {0, 1, 2}) {
        const RoutingHistogram h = skewed(experts, {1, 3}, 1.2);
        const ExpertPlacement placed(h, ranks, redundant), contiguous(experts, ranks);
        const int64_t slots = (experts + ranks - 1) / ranks + redundant;
        for (int64_t layer : {1, 2, 3}) {
          std::vector<int64_t> held(static_cast<size_t>(ranks), 0);
          for (int64_t e = 0; e < experts; ++e) {
            int copies = 0;
            for (int r = 0; r < ranks; ++r) {
              if (placed.holds(r, layer, e)) ++copies, ++held[static_cast<size_t>(r)];
            }
            EXPECT_GE(copies, 1) << experts << " experts, " << ranks << " ranks, expert " << e;
            for (int64_t t = 0; t < 5; ++t) EXPECT_TRUE(placed.holds(placed.holder(layer, e, t), layer, e));
          }
          for (int64_t n : held) EXPECT_LE(n, layer == 2 ? (experts + ranks - 1) / ranks : slots);
          EXPECT_LE(placed.imbalance(h, layer), contiguous.imbalance(h, layer) + 1e-9) << experts << "/" << ranks << "/" << redundant;
        }
        // A layer without counts keeps the contiguous split.
        for (int64_t e = 0; e < experts; ++e) EXPECT_EQ(placed.holder(2, e, 0), split_owner(e, experts, ranks));
      }
    }
  }
  const RoutingHistogram h = skewed(64, {1}, 1.2);
  EXPECT_GT(ExpertPlacement(64, 8).imbalance(h, 1), 2.0);
  EXPECT_LT(ExpertPlacement(h, 8, 2).imbalance(h, 1), 1.2);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/k3_placement_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(RoutingHistogram, RoundTripsAndRefusesMalformedFiles) {
  const RoutingHistogram h = skewed(4, {1, 5}, 1.0);
  const std::string path = write_file("ok.json", "");
  h.save(path);
  const RoutingHistogram back = RoutingHistogram::load(path, 4);
  EXPECT_EQ(back.layers, h.layers);
  const struct {
    const char* text;
    const char* message;
  } bad[] = {
      {R"({"experts":5,"layers":{}})", "out of range"},
      {R"({"experts":4,"layers":{"1":[1,2,3]}})", "has 3 counts for 4 experts"},
      {R"({"experts":4,"layers":{"x":[1,2,3,4]}})", "layer key 'x' is not a layer index"},
      {R"({"experts":4,"layers":{"1":[1,2,-3,4]}})", "out of range"},
      {R"({"experts":4})", "layers"},
      {R"({"experts":4,"layers":)", "json"},
  };
  for (const auto& b : bad) {
    const std::string file = write_file("bad.json", b.text);
    try {
      RoutingHistogram::load(file, 4);
      ADD_FAILURE() << b.text << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      std::string lower = what;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_NE(lower.find(b.message), std::string::npos) << b.text << ": " << what;
    }
  }
}

// Logits of a prefill of two sequences, two batched decode steps and a greedy generation.
std::vector<std::vector<float>> engine_logits(const std::string& dir, const EngineOptions& o) {
  Engine e(dir, o);
  const int64_t vocab = e.config().vocab_size;
  std::vector<std::vector<float>> out;
  const int64_t a = e.new_sequence(), b = e.new_sequence();
  std::vector<StepResult> step = e.step({{a, test::test_prompt(21, vocab, 1), true}, {b, test::test_prompt(9, vocab, 2), true}});
  for (int i = 0; i < 3; ++i) {
    for (const StepResult& s : step) out.push_back(s.logits);
    if (i < 2) step = e.step({{a, {(i * 5 + 1) % vocab}}, {b, {(i * 3 + 2) % vocab}}});
  }
  GenerateOptions g;
  g.max_tokens = 6;
  g.stop_at_eos = false;
  const std::vector<int64_t> ids = generate(e, test::test_prompt(7, vocab, 3), g).ids;
  out.push_back(std::vector<float>(ids.begin(), ids.end()));
  return out;
}

class PlacedExperts : public ::testing::TestWithParam<TinyArch> {};

TEST_P(PlacedExperts, GiveTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 32);
  EngineOptions one;
  one.threads = 2;
  one.max_sequences = 4;
  one.max_context = 256;
  // Record this workload's routing, then place from it.
  RoutingHistogram recorded;
  recorded.experts = open_checkpoint_dir(tiny.dir).config->moe->num_experts;
  EngineOptions recording = one;
  recording.routing_record = &recorded;
  const auto alone = engine_logits(tiny.dir, recording);
  ASSERT_FALSE(recorded.layers.empty());
  for (const auto& [ranks, redundant] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{3, 2}}) {
    EngineOptions o = one;
    o.expert_parallel = ranks;
    o.expert_histogram = &recorded;
    o.redundant_experts = redundant;
    const auto got = engine_logits(tiny.dir, o);
    ASSERT_EQ(got.size(), alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      ASSERT_EQ(got[i].size(), alone[i].size());
      EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0)
          << ranks << " ranks, " << redundant << " redundant, output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, PlacedExperts, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         [](const auto& info) { return info.param == TinyArch::KimiK3 ? "KimiK3" : "KimiLinear"; });

// Hybrid CPU/GPU experts: the coldest experts of each MoE layer (or of a rank's split) go to the CPU
// (ties: the higher index), the last ones where the histogram has no record, none in a dense layer;
// the count is bounded.
TEST(CpuExperts, TheColdestOfEachLayerGoToTheCpu) {
  RoutingHistogram h;
  h.experts = 6;
  h.layers[1] = {50, 0, 7, 7, 90, 3};
  const std::vector<bool> moe = {false, true, true};
  const auto on_cpu = choose_cpu_experts(moe, 6, 3, &h, 0, 6);
  ASSERT_EQ(on_cpu.size(), 3u);
  EXPECT_TRUE(on_cpu[0].empty());
  EXPECT_EQ(on_cpu[1], (std::vector<bool>{false, true, false, true, false, true}));  // 0 picks, 3, then 7 (index 3 first)
  EXPECT_EQ(on_cpu[2], (std::vector<bool>{false, false, false, true, true, true}));  // no record: the last three
  EXPECT_EQ(choose_cpu_experts(moe, 6, 2, nullptr, 0, 6)[1], (std::vector<bool>{false, false, false, false, true, true}));
  // Within an expert-parallel rank's split [2, 5): the coldest there, or the last there.
  EXPECT_EQ(choose_cpu_experts(moe, 6, 1, &h, 2, 5)[1], (std::vector<bool>{false, false, false, true, false, false}));
  EXPECT_EQ(choose_cpu_experts(moe, 6, 2, nullptr, 2, 5)[2], (std::vector<bool>{false, false, false, true, true, false}));
  for (const int64_t bad : {0, 6, -1}) {
    try {
      choose_cpu_experts(moe, 6, bad, nullptr, 0, 6);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--experts-on-cpu"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace k3
