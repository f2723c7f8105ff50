// Placement and the decode model (parallel/placement.h, roofline.h): the expected-distinct-experts
// and untouched-GPU formulas against Monte-Carlo estimates (fixed seed); bytes per device summing to
// the model's bytes; the real Kimi-K3 release (compressed-tensors MXFP4) and its NVFP4 ModelOpt
// variant on 2×8 H200, 1×8 H200 with host memory, and the refusal without it; the config-only
// layout agreeing with a header-only checkpoint's plan; the per-parameter partitioning rules.
#include "parallel/placement.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "error_of.h"
#include "model/tiny_config.h"
#include "parallel/roofline.h"
#include "parallel/sharding.h"
#include "quant/families/family.h"
#include "quant/families/family_writer.h"

namespace k3 {
namespace {

const std::string kK3Config = std::string(K3_SHARED_DIR) + "/fixtures/real-configs/kimi-k3.config.json";

Json real_config_doc() { return without_quantization_config(Json::parse(std::ifstream(kK3Config))); }

K3Config parse(const Json& doc) { return parse_k3_config(parse_json(doc.dump(), "config.json")); }

Machine machine(int64_t gpus, int64_t nodes, uint64_t host = 0, bool cpu = false) {
  Machine m;
  m.device = &device_kinds().front();  // H200
  m.gpus_per_node = gpus;
  m.nodes = nodes;
  m.host_bytes = host;
  m.cpu_experts = cpu;
  return m;
}

// One token picks k distinct experts of E uniformly (a partial Fisher-Yates shuffle).
void pick(std::mt19937_64& rng, std::vector<int>& order, int k) {
  for (int i = 0; i < k; ++i) {
    std::uniform_int_distribution<int> u(i, static_cast<int>(order.size()) - 1);
    std::swap(order[i], order[u(rng)]);
  }
}

TEST(Roofline, ExpectedDistinctExpertsMatchesMonteCarlo) {
  const int E = 896, k = 16, trials = 300;
  std::mt19937_64 rng(20251207);
  std::vector<int> order(E);
  for (int batch : {1, 8, 64, 256}) {
    double sum = 0;
    for (int t = 0; t < trials; ++t) {
      std::vector<char> hit(E, 0);
      for (int b = 0; b < batch; ++b) {
        for (int e = 0; e < E; ++e) order[e] = e;
        pick(rng, order, k);
        for (int i = 0; i < k; ++i) hit[order[i]] = 1;
      }
      for (char h : hit) sum += h;
    }
    const double expected = expected_distinct_experts(E, k, batch);
    EXPECT_NEAR(sum / trials, expected, 0.01 * expected + 0.5) << "batch " << batch;
  }
  EXPECT_NEAR(expected_distinct_experts(E, k, 1), 16.0, 1e-9);
  EXPECT_NEAR(expected_distinct_experts(E, k, 64), 613.2, 0.05);
}

TEST(Roofline, UntouchedGpuProbabilityMatchesMonteCarlo) {
  const int E = 896, k = 16, trials = 20000;
  std::mt19937_64 rng(7);
  std::vector<int> order(E);
  for (int m : {56, 112, 448}) {
    int missed = 0;
    for (int t = 0; t < trials; ++t) {
      for (int e = 0; e < E; ++e) order[e] = e;
      pick(rng, order, k);
      bool any = false;
      for (int i = 0; i < k; ++i) any |= order[i] < m;  // the GPU owning experts [0, m)
      missed += any ? 0 : 1;
    }
    EXPECT_NEAR(static_cast<double>(missed) / trials, prob_untouched(E, k, m), 0.01) << "m " << m;
  }
  EXPECT_DOUBLE_EQ(prob_untouched(E, k, 0), 1.0);
  EXPECT_DOUBLE_EQ(prob_untouched(20, 16, 10), 0.0);
}

// Σ over GPUs and hosts = routed experts once + the TP part once per node, its replicated
// parameters once per GPU.
void expect_bytes_sum(const Placement& p) {
  uint64_t placed = 0, hosts = 0;
  for (const GpuPlacement& g : p.gpus) {
    uint64_t groups = 0;
    for (uint64_t b : g.group_bytes) groups += b;
    EXPECT_EQ(groups, g.weight_bytes);
    placed += g.weight_bytes;
  }
  for (uint64_t h : p.host_bytes) hosts += h;
  const uint64_t experts = p.group_bytes[static_cast<size_t>(ParamGroup::Experts)];
  const uint64_t n = static_cast<uint64_t>(p.machine.nodes), t = static_cast<uint64_t>(p.tp);
  EXPECT_EQ(placed + hosts, experts + n * (p.model_bytes - experts) + n * (t - 1) * p.replicated_bytes);
  EXPECT_EQ(experts, p.expert_bytes * static_cast<uint64_t>(p.num_experts));
}

TEST(Placement, BytesPerDeviceSumToTheModelsBytes) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Small);
  const K3Config c = parse(doc);
  for (FamilyId family : {FamilyId::Bf16, FamilyId::CompressedTensorsMxfp4, FamilyId::ModelOptMixed, FamilyId::Gguf}) {
    const Footprint f = layout_footprint(family, ShapeOnlySource(c), doc);
    for (const auto& [gpus, nodes] : {std::pair{1, 1}, {2, 1}, {4, 2}, {3, 1}}) {
      if (gpus == 3) continue;  // heads do not split in three (tested below)
      const Placement p = plan_placement(f, c, machine(gpus, nodes), PlanOptions{});
      ASSERT_EQ(p.gpus.size(), static_cast<size_t>(gpus * nodes));
      expect_bytes_sum(p);
      EXPECT_EQ(p.model_bytes, f.total_bytes());
      int64_t experts = 0;
      for (const GpuPlacement& g : p.gpus) experts += g.experts;
      EXPECT_EQ(experts, c.moe->num_experts) << family_name(family);
    }
  }
}

TEST(Placement, ATensorSplitThatDoesNotDivideIsRefusedNamingTheParameter) {
  const Json doc = tiny_config_json(TinyArch::KimiK3, TinySize::Small);
  const K3Config c = parse(doc);
  const Footprint f = layout_footprint(FamilyId::Bf16, ShapeOnlySource(c), doc);
  const std::string error = test::error_of([&] { plan_placement(f, c, machine(3, 1), PlanOptions{}); });
  EXPECT_EQ(error.rfind("tensor 'model.", 0), 0u) << error;
  EXPECT_NE(error.find("': field '--devices': cannot split its "), std::string::npos) << error;
  EXPECT_NE(error.find(" among 3 GPUs of a node"), std::string::npos) << error;
}

// The real release and its NVFP4 ModelOpt variant: 2×8 fits on the GPUs, 1×8 needs host memory.
void expect_real_plans(FamilyId family, uint64_t model_bytes) {
  const Json doc = real_config_doc();
  const K3Config c = parse(doc);
  const Footprint f = layout_footprint(family, ShapeOnlySource(c), doc);
  EXPECT_EQ(f.total_bytes(), model_bytes) << family_name(family);

  const Placement two = plan_placement(f, c, machine(8, 2), PlanOptions{});
  expect_bytes_sum(two);
  EXPECT_EQ(two.tp, 8);
  EXPECT_EQ(two.ep, 16);
  for (const GpuPlacement& g : two.gpus) {
    EXPECT_EQ(g.experts, 56);
    EXPECT_EQ(g.resident_experts, 56);
    EXPECT_LE(g.weight_bytes + kRuntimeReserveBytes + g.state_bytes + g.free_bytes, two.machine.device->memory_bytes);
  }
  EXPECT_FALSE(two.streams_experts());
  EXPECT_EQ(two.planned_sequences, 32);

  const uint64_t host = uint64_t{3} << 39;  // 1.5 TiB
  const Placement one = plan_placement(f, c, machine(8, 1, host), PlanOptions{});
  expect_bytes_sum(one);
  EXPECT_TRUE(one.streams_experts());
  EXPECT_GT(one.host_bytes[0], 0u);
  EXPECT_LE(one.host_bytes[0], host);
  for (const GpuPlacement& g : one.gpus) {
    EXPECT_EQ(g.experts, 112);
    EXPECT_LT(g.resident_experts, 112);
    EXPECT_GT(g.resident_experts, 0);
    EXPECT_EQ(g.weight_bytes + kRuntimeReserveBytes + g.state_bytes + one.staging_bytes + g.free_bytes, one.machine.device->memory_bytes);
  }
  const Placement cpu = plan_placement(f, c, machine(8, 1, host, true), PlanOptions{});
  EXPECT_TRUE(cpu.cpu_computes_experts());
  EXPECT_FALSE(cpu.streams_experts());

  const std::string refusal = test::error_of([&] { plan_placement(f, c, machine(8, 1), PlanOptions{}); });
  EXPECT_EQ(refusal.rfind("field '--devices': does not fit: the routed experts take ", 0), 0u) << refusal;
  EXPECT_NE(refusal.find("add --host-memory, --nodes or devices"), std::string::npos) << refusal;
  const std::string small = test::error_of([&] { plan_placement(f, c, machine(8, 1, uint64_t{100} << 30), PlanOptions{}); });
  EXPECT_NE(small.find("of routed experts must live in each node's host memory and --host-memory gives 107.4 GB"), std::string::npos) << small;
}

TEST(Placement, RealK3ReleaseOnTwoNodesAndOnOneNodeWithHostMemory) {
  expect_real_plans(FamilyId::CompressedTensorsMxfp4, 1559965442048);
}

TEST(Placement, RealK3Nvfp4VariantOnTwoNodesAndOnOneNodeWithHostMemory) {
  expect_real_plans(FamilyId::ModelOptMixed, 1608882204992);
}

TEST(Placement, DecodeEstimateOfTheRealReleaseFollowsItsFormulas) {
  const Json doc = real_config_doc();
  const K3Config c = parse(doc);
  const Footprint f = layout_footprint(FamilyId::CompressedTensorsMxfp4, ShapeOnlySource(c), doc);
  const Placement p = plan_placement(f, c, machine(8, 2), PlanOptions{});
  const DecodeEstimate one = estimate_decode(p, c, 1), many = estimate_decode(p, c, 64);
  EXPECT_DOUBLE_EQ(one.node_tokens, 1.0);
  EXPECT_DOUBLE_EQ(many.node_tokens, 32.0);
  EXPECT_NEAR(one.experts_touched, 16.0, 1e-9);
  // Expert bytes on GPU 0: its 56 experts × P(touched) × one expert over the 92 layers.
  EXPECT_DOUBLE_EQ(many.expert_bytes, 56.0 * (many.experts_touched / 896.0) * static_cast<double>(p.expert_bytes));
  // A token's picks reach 16·(1 − C(840,16)/C(896,16)) GPUs, half of them in its node.
  EXPECT_NEAR(one.dests_in_node + one.dests_off_node, 16.0 * (1.0 - prob_untouched(896, 16, 56)), 1e-9);
  EXPECT_NEAR(one.dests_in_node, one.dests_off_node, 1e-9);
  // Dispatch + combine over InfiniBand: 2 × 92 layers × tokens × remote GPUs × 3584 × 2 B ÷ 8 senders.
  EXPECT_NEAR(many.network_bytes, 2.0 * 92 * 32 * many.dests_off_node * 7168 / 8, 1e-3);
  EXPECT_EQ(many.collectives, 184);
  EXPECT_EQ(many.node_collectives, 2 * 93 + 1 + 92 + 1);
  EXPECT_GT(many.tokens_per_second(), one.tokens_per_second());
  EXPECT_LE(many.tokens_per_second(), many.overlap_tokens_per_second());
  EXPECT_EQ(state_geometry(c).mla_bytes_per_token, 24u * 576 * 2);
  EXPECT_EQ(state_geometry(c).kda_bytes_per_sequence, 69u * (96 * 128 * 128 * 4 + 3 * 12288 * 3 * 2));
}

// The config-only layout (k3 check on config files) equals the plan of a header-only checkpoint
// (k3 make-headers) parameter by parameter: the real config cut to its first four layers.
TEST(Placement, LayoutFootprintEqualsTheHeaderPlan) {
  Json doc = real_config_doc();
  Json& text = doc["text_config"];
  text["num_hidden_layers"] = 4;
  text["attn_res_block_size"] = 2;
  text["linear_attn_config"]["kda_layers"] = Json::array({1, 2, 3});
  text["linear_attn_config"]["full_attn_layers"] = Json::array({4});
  const K3Config c = parse(doc);
  for (FamilyId family : {FamilyId::CompressedTensorsMxfp4, FamilyId::ModelOptMixed}) {
    const std::string dir = ::testing::TempDir() + "/k3_headers_" + family_name(family);
    std::filesystem::remove_all(dir);
    write_family_headers(family, ShapeOnlySource(c), doc, dir);
    const LoadPlan plan = plan_checkpoint(dir);
    ASSERT_TRUE(plan.ok()) << plan.problems.front().text();
    const Footprint headers = footprint_of(plan), layout = layout_footprint(family, ShapeOnlySource(c), doc);
    ASSERT_EQ(headers.params.size(), layout.params.size());
    for (size_t i = 0; i < headers.params.size(); ++i) {
      EXPECT_EQ(headers.params[i].spec.name, layout.params[i].spec.name);
      EXPECT_EQ(headers.params[i].bytes, layout.params[i].bytes) << headers.params[i].spec.name;
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(Sharding, EveryParameterOfTheRealModelHasItsRule) {
  const K3Config c = parse(real_config_doc());
  for (const ParamSpec& s : parameter_inventory(c)) EXPECT_NO_THROW(shard_rule(s)) << s.name;
  const auto rule = [&](const std::string& name) {
    for (const ParamSpec& s : parameter_inventory(c)) {
      if (s.name == name) return shard_rule(s).split;
    }
    ADD_FAILURE() << name;
    return Split::kReplicate;
  };
  const std::string kda = "model.layers.0.self_attn.", mla = "model.layers.3.self_attn.", moe = "model.layers.3.block_sparse_moe.";
  EXPECT_EQ(rule(kda + "q_proj.weight"), Split::kRows);
  EXPECT_EQ(rule(kda + "b_proj.weight"), Split::kRows);
  EXPECT_EQ(rule(kda + "f_a_proj.weight"), Split::kReplicate);
  EXPECT_EQ(rule(kda + "o_proj.weight"), Split::kColumns);
  EXPECT_EQ(rule(kda + "A_log"), Split::kRows);
  EXPECT_EQ(rule(mla + "kv_a_proj_with_mqa.weight"), Split::kReplicate);
  EXPECT_EQ(rule(mla + "kv_b_proj.weight"), Split::kRows);
  EXPECT_EQ(rule(mla + "g_proj.weight"), Split::kRows);
  EXPECT_EQ(rule(mla + "o_proj.weight"), Split::kColumns);
  EXPECT_EQ(rule(moe + "gate.weight"), Split::kReplicate);
  EXPECT_EQ(rule(moe + "routed_expert_down_proj.weight"), Split::kRows);
  EXPECT_EQ(rule(moe + "routed_expert_norm.weight"), Split::kRows);
  EXPECT_EQ(rule(moe + "routed_expert_up_proj.weight"), Split::kColumns);
  EXPECT_EQ(rule(moe + "shared_experts.down_proj.weight"), Split::kColumns);
  EXPECT_EQ(rule(moe + "experts.w2.weight"), Split::kExperts);
  EXPECT_EQ(rule("model.embed_tokens.weight"), Split::kRows);
  EXPECT_EQ(rule("lm_head.weight"), Split::kRows);
  ParamSpec unknown{"model.layers.0.self_attn.new_proj.weight", {8, 8}, ParamKind::Linear, ParamGroup::Kda, 0};
  EXPECT_EQ(test::error_of([&] { shard_rule(unknown); }),
            "tensor 'model.layers.0.self_attn.new_proj.weight': no tensor/expert-parallel partitioning rule covers this parameter");
  EXPECT_EQ(shard_bytes(10, Split::kRows, 4, 0) + shard_bytes(10, Split::kRows, 4, 1) + shard_bytes(10, Split::kRows, 4, 2) +
                shard_bytes(10, Split::kRows, 4, 3),
            10u);
}

TEST(Machine, DevicesFlagText) {
  EXPECT_EQ(parse_devices("8xH200").count, 8);
  EXPECT_STREQ(parse_devices("h100").kind->name, "H100");
  EXPECT_EQ(parse_devices("16XH100").count, 16);
  EXPECT_EQ(test::error_of([] { parse_devices("8xFOO"); }), "field '--devices': '8xFOO' names no known device kind (known: H200, H100)");
  EXPECT_EQ(test::error_of([] { parse_devices("0xH200"); }), "field '--devices': '0xH200': the count must be in [1, 64]");
  EXPECT_EQ(test::error_of([] { parse_devices("-8xH200"); }), "field '--devices': '-8xH200' is not COUNTxKIND (e.g. 8xH200)");
}

}  // namespace
}  // namespace k3
