#include "model/config.h"

#include <gtest/gtest.h>

#include "error_of.h"
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace k3 {
namespace {

const std::string kK3Config = std::string(K3_SHARED_DIR) + "/fixtures/real-configs/kimi-k3.config.json";
const std::string kPeerDir = std::string(K3_SHARED_DIR) + "/fixtures/kimi-linear-peer/ckpt";

using test::error_of;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

// Parses a fixture after `edit` changed it, as if it were a file named config.json.
K3Config parse_edited(const std::string& path, const std::function<void(Json&)>& edit) {
  Json doc = read_json(path);
  edit(doc);
  return parse_k3_config(parse_json(doc.dump(), "config.json"));
}

std::string k3_error(const std::function<void(Json&)>& edit) {
  return error_of([&] { parse_edited(kK3Config, edit); });
}

std::string peer_error(const std::function<void(Json&)>& edit) {
  return error_of([&] { parse_edited(kPeerDir + "/config.json", edit); });
}

TEST(K3Config, RealK3ReleaseConfig) {
  K3Config c = load_k3_config(kK3Config);
  EXPECT_EQ(c.file, kK3Config);
  EXPECT_EQ(c.model_type, ModelType::kKimiK3);
  EXPECT_EQ(c.text_path, "text_config");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.num_layers, 93);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_EQ(c.activation.kind, Activation::kSitu);
  EXPECT_EQ(c.activation.situ_beta, 4.0);
  EXPECT_EQ(c.activation.situ_linear_beta, 25.0);
  EXPECT_EQ(c.attn_res_block_size, 12);

  EXPECT_EQ(c.kda.num_heads, 96);
  EXPECT_EQ(c.kda.head_dim, 128);
  EXPECT_EQ(c.kda.projection_dim(), 12288);
  EXPECT_EQ(c.kda.short_conv_kernel_size, 4);
  EXPECT_EQ(c.kda.gate_lower_bound, -5.0);
  EXPECT_TRUE(c.kda.use_full_rank_gate);

  EXPECT_EQ(c.mla.num_heads, 96);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla.qk_head_dim(), 192);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  EXPECT_TRUE(c.mla.use_output_gate);
  EXPECT_EQ(c.mla.low_rank_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.mla.softmax_scale(), 1.0 / std::sqrt(192.0));

  ASSERT_TRUE(c.moe.has_value());
  const MoeConfig& moe = *c.moe;
  EXPECT_EQ(moe.num_experts, 896);
  EXPECT_EQ(moe.experts_per_token, 16);
  EXPECT_EQ(moe.num_shared_experts, 2);
  EXPECT_EQ(moe.moe_intermediate_size, 3072);
  EXPECT_EQ(moe.shared_intermediate_size(), 6144);
  EXPECT_EQ(moe.first_k_dense_replace, 1);
  EXPECT_EQ(moe.moe_layer_freq, 1);
  EXPECT_EQ(moe.scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(moe.renormalize);
  EXPECT_EQ(moe.routed_scaling_factor, 1.0);
  EXPECT_TRUE(moe.use_grouped_topk);
  EXPECT_EQ(moe.num_expert_group, 1);
  EXPECT_EQ(moe.topk_group, 1);
  EXPECT_TRUE(moe.has_score_correction_bias);
  EXPECT_EQ(moe.routed_expert_hidden_size, 3584);
  EXPECT_TRUE(moe.latent_moe_use_norm);

  // Spec §1: MLA at 0-based {3, 7, ..., 87, 91} plus 92 (1-based lists 4, 8, ..., 92, 93).
  ASSERT_EQ(c.mixer.size(), 93u);
  for (int64_t l = 0; l < 93; ++l) {
    bool mla = (l % 4 == 3) || l == 92;
    EXPECT_EQ(c.mixer[l], mla ? MixerKind::kMla : MixerKind::kKda) << "layer " << l;
    EXPECT_EQ(c.is_moe(l), l >= 1) << "layer " << l;
  }
  EXPECT_TRUE(c.is_kda(0));
  EXPECT_FALSE(c.is_kda(91));
  EXPECT_FALSE(c.is_kda(92));
  EXPECT_TRUE(c.is_kda(90));
  EXPECT_EQ(c.count(MixerKind::kKda), 69);
  EXPECT_EQ(c.count(MixerKind::kMla), 24);
  EXPECT_EQ(c.count(FfnKind::kDense), 1);
  EXPECT_EQ(c.count(FfnKind::kMoe), 92);

  EXPECT_EQ(c.tokens.bos, 163584);
  EXPECT_EQ(c.tokens.eos, (std::vector<int64_t>{163586}));
  EXPECT_EQ(c.tokens.pad, 163839);
}

TEST(K3Config, KimiLinearPeerConfig) {
  K3Config c = load_k3_config(kPeerDir + "/config.json");
  EXPECT_EQ(c.model_type, ModelType::kKimiLinear);
  EXPECT_EQ(c.text_path, "");
  EXPECT_EQ(c.hidden_size, 96);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.activation.kind, Activation::kSilu);
  EXPECT_EQ(c.attn_res_block_size, std::nullopt);

  EXPECT_EQ(c.kda.num_heads, 6);
  EXPECT_EQ(c.kda.head_dim, 16);
  EXPECT_EQ(c.kda.short_conv_kernel_size, 4);
  EXPECT_EQ(c.kda.gate_lower_bound, std::nullopt);  // softplus forget gate
  EXPECT_FALSE(c.kda.use_full_rank_gate);           // g_a_proj / g_b_proj

  EXPECT_EQ(c.mla.num_heads, 3);
  EXPECT_EQ(c.mla.q_lora_rank, 40);
  EXPECT_EQ(c.mla.kv_lora_rank, 48);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 40);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 0);
  EXPECT_EQ(c.mla.v_head_dim, 24);
  EXPECT_FALSE(c.mla.use_output_gate);

  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->experts_per_token, 3);
  EXPECT_EQ(c.moe->num_shared_experts, 2);
  EXPECT_EQ(c.moe->moe_intermediate_size, 48);
  EXPECT_EQ(c.moe->first_k_dense_replace, 2);
  EXPECT_EQ(c.moe->moe_layer_freq, 1);
  EXPECT_EQ(c.moe->scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.moe->renormalize);
  EXPECT_EQ(c.moe->routed_scaling_factor, 2.446);
  EXPECT_EQ(c.moe->num_expert_group, 2);
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_EQ(c.moe->routed_expert_hidden_size, std::nullopt);
  EXPECT_FALSE(c.moe->latent_moe_use_norm);

  using M = MixerKind;
  using F = FfnKind;
  EXPECT_EQ(c.mixer, (std::vector<M>{M::kKda, M::kKda, M::kMla, M::kKda, M::kKda, M::kMla}));
  EXPECT_EQ(c.ffn, (std::vector<F>{F::kDense, F::kDense, F::kMoe, F::kMoe, F::kMoe, F::kMoe}));
  EXPECT_EQ(c.tokens.bos, 1);
  EXPECT_EQ(c.tokens.eos, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.tokens.pad, 0);
}

TEST(K3Config, PeerGenerationConfig) {
  GenerationConfig g = load_generation_config(kPeerDir + "/generation_config.json");
  EXPECT_EQ(g.bos_token_id, 1);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(g.pad_token_id, 0);
  EXPECT_EQ(g.do_sample, std::nullopt);
  EXPECT_EQ(g.temperature, std::nullopt);
  EXPECT_EQ(g.top_k, std::nullopt);
  EXPECT_EQ(g.max_new_tokens, std::nullopt);
}

TEST(K3Config, GenerationConfigFields) {
  GenerationConfig g = parse_generation_config(parse_json(
      R"({"eos_token_id": [163586, 163585], "temperature": 0.6, "top_p": 0.95, "top_k": 20,
          "max_new_tokens": 512, "do_sample": true, "max_length": 4096})",
      "generation_config.json"));
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{163586, 163585}));
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.95);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.max_new_tokens, 512);
  EXPECT_EQ(g.max_length, 4096);
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.bos_token_id, std::nullopt);
  auto gen_error = [](const std::string& text) {
    return error_of([&] { parse_generation_config(parse_json(text, "generation_config.json")); });
  };
  EXPECT_EQ(gen_error(R"({"eos_token_id": "2"})"),
            "generation_config.json: field 'eos_token_id': expected an integer or a list of integers, got the string \"2\"");
  EXPECT_EQ(gen_error(R"({"eos_token_id": [2, -1]})"), "generation_config.json: field 'eos_token_id': token id -1 is negative");
  EXPECT_EQ(gen_error(R"({"top_p": 1.5})"), "generation_config.json: field 'top_p': must be in (0, 1], got 1.5");
  EXPECT_EQ(gen_error(R"({"temperature": 1e300})"),
            "generation_config.json: field 'temperature': 1e+300 is out of range [0, 1000]");
  EXPECT_EQ(gen_error(R"({"top_k": 2.0})"), "generation_config.json: field 'top_k': expected an integer, got 2.0");
  EXPECT_EQ(gen_error(R"({"do_sample": "yes"})"),
            "generation_config.json: field 'do_sample': expected true or false, got the string \"yes\"");
}

TEST(K3Config, MissingAndIllTypedFieldsNameTheKeyPath) {
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"].erase("num_hidden_layers"); }),
            "config.json: field 'text_config.num_hidden_layers': missing required field");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["hidden_size"] = "7168"; }),
            "config.json: field 'text_config.hidden_size': expected an integer, got the string \"7168\"");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_experts"] = 896.0; }),
            "config.json: field 'text_config.num_experts': expected an integer, got 896.0");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["tie_word_embeddings"] = 0; }),
            "config.json: field 'text_config.tie_word_embeddings': expected true or false, got 0");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"].erase("head_dim"); }),
            "config.json: field 'text_config.linear_attn_config.head_dim': missing required field");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"].erase("rms_norm_eps"); }),
            "config.json: field 'text_config.rms_norm_eps': missing required field");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"].erase("q_lora_rank"); }),
            "config.json: field 'text_config.q_lora_rank': missing required field");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["moe_layer_freq"] = nullptr; }),
            "config.json: field 'text_config.moe_layer_freq': must not be null");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_hidden_layers"] = 18446744073709551615ull; }),
            "config.json: field 'text_config.num_hidden_layers': 18446744073709551615 is out of range [1, 16384]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_hidden_layers"] = 0; }),
            "config.json: field 'text_config.num_hidden_layers': 0 is out of range [1, 16384]");
  EXPECT_EQ(k3_error([](Json& j) { j.erase("text_config"); }), "config.json: field 'text_config': missing required field");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"] = Json::array(); }),
            "config.json: field 'text_config': expected an object, got an array");
}

TEST(K3Config, ModelTypes) {
  EXPECT_EQ(k3_error([](Json& j) { j["model_type"] = "deepseek_v3"; }),
            "config.json: field 'model_type': unsupported model type \"deepseek_v3\" (expected \"kimi_linear\" or "
            "\"kimi_k3\")");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["model_type"] = "kimi_k3"; }),
            "config.json: field 'text_config.model_type': unsupported text model type \"kimi_k3\" (expected "
            "\"kimi_linear\")");
  // A flat kimi_linear config holding the K3 text fields parses to the same model.
  K3Config flat = parse_edited(kK3Config, [](Json& j) { j = j["text_config"]; });
  EXPECT_EQ(flat.model_type, ModelType::kKimiLinear);
  EXPECT_EQ(flat.text_path, "");
  EXPECT_EQ(flat.mixer, load_k3_config(kK3Config).mixer);
}

TEST(K3Config, LayerListsAreOneBasedAndPartitionTheLayers) {
  const std::string kda = "config.json: field 'text_config.linear_attn_config.kda_layers";
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][0] = 0; }),
            kda + "[0]': layer number 0 in a 1-based list (valid numbers are [1, 93]; was the list written 0-based?)");
  // A whole list written 0-based is caught the same way.
  EXPECT_EQ(k3_error([](Json& j) {
              for (Json& n : j["text_config"]["linear_attn_config"]["kda_layers"]) n = n.get<int>() - 1;
              for (Json& n : j["text_config"]["linear_attn_config"]["full_attn_layers"]) n = n.get<int>() - 1;
            }),
            kda + "[0]': layer number 0 in a 1-based list (valid numbers are [1, 93]; was the list written 0-based?)");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][68] = 94; }),
            kda + "[68]': layer number 94 is outside [1, 93] (1-based)");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][1] = 1; }),
            kda + "[1]': layer number 1 is listed twice in kda_layers");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"].push_back(5); }),
            "config.json: field 'text_config.linear_attn_config.full_attn_layers[24]': layer number 5 is listed in "
            "both kda_layers and full_attn_layers");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"].erase(23); }),
            "config.json: field 'text_config.linear_attn_config': layer number 93 (index 92) is in neither kda_layers "
            "nor full_attn_layers");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"].erase("full_attn_layers"); }),
            "config.json: field 'text_config.linear_attn_config.full_attn_layers': missing required field");
  EXPECT_EQ(k3_error([](Json& j) {
              j["text_config"]["linear_attn_config"].erase("full_attn_layers");
              j["text_config"]["linear_attn_config"].erase("kda_layers");
            }),
            "config.json: field 'text_config.linear_attn_config': no layer kinds: need kda_layers and "
            "full_attn_layers (1-based), or a top-level layer_types");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][0] = 1.0; }),
            kda + "[0]': expected an integer, got 1.0");
}

TEST(K3Config, LayerTypesAgreeWithTheLists) {
  // Without the 1-based lists, layer_types alone gives the same kinds.
  K3Config typed = parse_edited(kPeerDir + "/config.json", [](Json& j) {
    j["linear_attn_config"].erase("kda_layers");
    j["linear_attn_config"].erase("full_attn_layers");
  });
  EXPECT_EQ(typed.mixer, load_k3_config(kPeerDir + "/config.json").mixer);
  EXPECT_EQ(peer_error([](Json& j) { j["layer_types"][2] = "linear_attention"; }),
            "config.json: field 'layer_types[2]': says KDA but linear_attn_config lists layer number 3 as MLA");
  EXPECT_EQ(peer_error([](Json& j) { j["layer_types"].erase(5); }),
            "config.json: field 'layer_types': has 5 entries but num_hidden_layers is 6");
  EXPECT_EQ(peer_error([](Json& j) { j["layer_types"][0] = "mamba"; }),
            "config.json: field 'layer_types[0]': unknown layer type \"mamba\" (expected \"linear_attention\" or "
            "\"full_attention\")");
  EXPECT_EQ(peer_error([](Json& j) { j["first_k_dense_replace"] = 1; }),
            "config.json: field 'mlp_layer_types[1]': says dense but num_experts / first_k_dense_replace / "
            "moe_layer_freq make layer 1 MoE");
  EXPECT_EQ(peer_error([](Json& j) { j["linear_num_heads"] = 8; }),
            "config.json: field 'linear_num_heads': is 8 but linear_attn_config.num_heads is 6");
  EXPECT_EQ(peer_error([](Json& j) { j["qk_head_dim"] = 64; }),
            "config.json: field 'qk_head_dim': is 64 but qk_nope_head_dim + qk_rope_head_dim is 40");
}

TEST(K3Config, FeatureFieldsAndTheirDefaults) {
  // Null beta falls back to 1.0 (spec §1); an absent one too.
  K3Config c = parse_edited(kK3Config, [](Json& j) {
    j["text_config"]["activation_situ_beta"] = nullptr;
    j["text_config"].erase("activation_situ_linear_beta");
  });
  EXPECT_EQ(c.activation.situ_beta, 1.0);
  EXPECT_EQ(c.activation.situ_linear_beta, std::nullopt);

  // Without the K3 feature keys, the reference defaults switch the features off.
  K3Config plain = parse_edited(kK3Config, [](Json& j) {
    Json& t = j["text_config"];
    for (const char* key : {"attn_res_block_size", "routed_expert_hidden_size", "latent_moe_use_norm",
                            "mla_use_output_gate", "moe_layer_freq", "moe_router_activation_func", "topk_method",
                            "use_grouped_topk", "num_nextn_predict_layers"}) {
      t.erase(key);
    }
    t["linear_attn_config"].erase("gate_lower_bound");
    t["linear_attn_config"].erase("use_full_rank_gate");
  });
  EXPECT_EQ(plain.attn_res_block_size, std::nullopt);
  EXPECT_EQ(plain.moe->routed_expert_hidden_size, std::nullopt);
  EXPECT_FALSE(plain.moe->latent_moe_use_norm);
  EXPECT_FALSE(plain.mla.use_output_gate);
  EXPECT_EQ(plain.moe->moe_layer_freq, 1);
  EXPECT_EQ(plain.moe->scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(plain.moe->use_grouped_topk);
  EXPECT_EQ(plain.num_nextn_predict_layers, 0);
  EXPECT_EQ(plain.kda.gate_lower_bound, std::nullopt);
  EXPECT_FALSE(plain.kda.use_full_rank_gate);

  K3Config dense = parse_edited(kK3Config, [](Json& j) { j["text_config"]["num_experts"] = nullptr; });
  EXPECT_FALSE(dense.moe.has_value());
  EXPECT_EQ(dense.count(FfnKind::kDense), 93);

  K3Config direct_q = parse_edited(kK3Config, [](Json& j) { j["text_config"]["q_lora_rank"] = nullptr; });
  EXPECT_EQ(direct_q.mla.q_lora_rank, std::nullopt);

  K3Config every_other = parse_edited(kK3Config, [](Json& j) { j["text_config"]["moe_layer_freq"] = 2; });
  EXPECT_FALSE(every_other.is_moe(0));
  EXPECT_TRUE(every_other.is_moe(2));
  EXPECT_FALSE(every_other.is_moe(3));
  EXPECT_EQ(every_other.count(FfnKind::kMoe), 46);
}

TEST(K3Config, UnsupportedOrInconsistentValues) {
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["hidden_act"] = "gelu"; }),
            "config.json: field 'text_config.hidden_act': unsupported activation \"gelu\" (expected \"silu\" or "
            "\"situ\")");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["activation_situ_beta"] = 0; }),
            "config.json: field 'text_config.activation_situ_beta': 0 is out of range [0.001, 1e+06]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["topk_method"] = "greedy"; }),
            "config.json: field 'text_config.topk_method': unsupported \"greedy\" (the Kimi router always selects "
            "with e_score_correction_bias: \"noaux_tc\")");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["moe_router_activation_func"] = "relu"; }),
            "config.json: field 'text_config.moe_router_activation_func': unsupported router scoring \"relu\" "
            "(expected \"sigmoid\" or \"softmax\")");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["mla_use_nope"] = false; }),
            "config.json: field 'text_config.mla_use_nope': MLA with rotary embeddings is not supported (Kimi MLA is "
            "NoPE)");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["rope_scaling"] = {{"factor", 32}}; }),
            "config.json: field 'text_config.rope_scaling': must be null or absent: MLA here is NoPE and applies no "
            "rope scaling");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["gate_lower_bound"] = 5.0; }),
            "config.json: field 'text_config.linear_attn_config.gate_lower_bound': must be negative, got 5.0");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_experts_per_token"] = 897; }),
            "config.json: field 'text_config.num_experts_per_token': 897 is out of range [1, 896]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_expert_group"] = 5; }),
            "config.json: field 'text_config.num_expert_group': must divide num_experts (896), got 5");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_expert_group"] = 128; }),
            "config.json: field 'text_config.num_experts_per_token': is 16 but topk_group 1 groups hold only 7 "
            "experts");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["routed_expert_hidden_size"] = 8000; }),
            "config.json: field 'text_config.routed_expert_hidden_size': 8000 is out of range [1, 7168]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["eos_token_id"] = 163840; }),
            "config.json: field 'text_config.eos_token_id': token id 163840 is outside the vocabulary [0, 163840)");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["bos_token_id"] = -1; }),
            "config.json: field 'text_config.bos_token_id': -1 is out of range [0, 163839]");
}

// Sizes and counts are range-checked before any use: a value beyond 32 bits is refused, not
// truncated.
TEST(K3Config, HugeIntegersAreOutOfRange) {
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["hidden_size"] = 4294967296ll; }),
            "config.json: field 'text_config.hidden_size': 4294967296 is out of range [1, 16777216]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["head_dim"] = 4294967424ll; }),
            "config.json: field 'text_config.linear_attn_config.head_dim': 4294967424 is out of range [1, 16777216]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_experts"] = 4294967296ll; }),
            "config.json: field 'text_config.num_experts': 4294967296 is out of range [1, 65536]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["kda_layers"][0] = 4294967297ll; }),
            "config.json: field 'text_config.linear_attn_config.kda_layers[0]': layer number 4294967297 is outside "
            "[1, 93] (1-based)");
}

// Products of fields that size a matrix, and the whole inventory, stay far from 64-bit overflow.
TEST(K3Config, SizeProductsAreBounded) {
  EXPECT_EQ(k3_error([](Json& j) {
              j["text_config"]["num_attention_heads"] = 1 << 16;
              j["text_config"]["v_head_dim"] = 1 << 10;
            }),
            "config.json: field 'text_config.num_attention_heads': num_attention_heads × (qk_nope_head_dim + "
            "v_head_dim) = 75497472 exceeds 16777216");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["num_shared_experts"] = 1 << 14; }),
            "config.json: field 'text_config.num_shared_experts': num_shared_experts × moe_intermediate_size = "
            "50331648 exceeds 16777216");
  const std::string total = k3_error([](Json& j) {
    j["text_config"]["num_experts"] = 1 << 16;
    j["text_config"]["moe_intermediate_size"] = 1 << 23;
  });
  EXPECT_EQ(total.rfind("config.json: field 'text_config': describes ", 0), 0u) << total;
  EXPECT_NE(total.find(" parameters, more than 281474976710656"), std::string::npos) << total;
}

// Float fields outside their plausible range (which give all-NaN or all-zero logits) are refused,
// with short numbers in the message.
TEST(K3Config, FloatFieldsHavePlausibleRanges) {
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["routed_scaling_factor"] = 1e308; }),
            "config.json: field 'text_config.routed_scaling_factor': 1e+308 is out of range [0.001, 1000]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["activation_situ_beta"] = 1e308; }),
            "config.json: field 'text_config.activation_situ_beta': 1e+308 is out of range [0.001, 1e+06]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["activation_situ_linear_beta"] = -2.5; }),
            "config.json: field 'text_config.activation_situ_linear_beta': -2.5 is out of range [0.001, 1e+06]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["rms_norm_eps"] = 1e308; }),
            "config.json: field 'text_config.rms_norm_eps': 1e+308 is out of range [1e-12, 0.1]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["rms_norm_eps"] = 0; }),
            "config.json: field 'text_config.rms_norm_eps': 0 is out of range [1e-12, 0.1]");
  EXPECT_EQ(k3_error([](Json& j) { j["text_config"]["linear_attn_config"]["gate_lower_bound"] = -1e300; }),
            "config.json: field 'text_config.linear_attn_config.gate_lower_bound': -1e+300 is out of range [-1000, "
            "-1e-06]");
  // The bounds hold the real values.
  K3Config edges = parse_edited(kK3Config, [](Json& j) {
    j["text_config"]["rms_norm_eps"] = kMaxRmsNormEps;
    j["text_config"]["routed_scaling_factor"] = kMinRoutedScalingFactor;
  });
  EXPECT_EQ(edges.rms_norm_eps, kMaxRmsNormEps);
  EXPECT_EQ(edges.moe->routed_scaling_factor, kMinRoutedScalingFactor);
}

TEST(K3Config, FileErrorsNameThePath) {
  const std::string path = ::testing::TempDir() + "k3_config_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << "{\"model_type\": \"kimi_linear\",\n \"hidden_size\": 96,,}";
  EXPECT_EQ(error_of([&] { load_k3_config(path); }),
            path + ": invalid JSON at line 2, column 20: syntax error while parsing object key - unexpected ','; "
                   "expected string literal");
  std::ofstream(path) << R"({"model_type": "kimi_linear", "hidden_size": 96})";
  EXPECT_EQ(error_of([&] { load_k3_config(path); }), path + ": field 'vocab_size': missing required field");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace k3
