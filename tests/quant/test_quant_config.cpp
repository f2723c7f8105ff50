#include "quant/quant_config.h"

#include <gtest/gtest.h>

#include "error_of.h"
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace k3 {
namespace {

const std::string kK3Config = std::string(K3_SHARED_DIR) + "/fixtures/real-configs/kimi-k3.config.json";

using test::error_of;

// The shape of the published K3 NVFP4 hf_quant_config.json (spec §2.5), keys deliberately not
// sorted so that file order is observable.
const char* kNestedModelOpt = R"({
  "producer": {"name": "modelopt", "version": "0.40.0"},
  "quantization": {
    "quant_algo": "MIXED_PRECISION",
    "kv_cache_quant_algo": null,
    "group_size": 16,
    "quantized_layers": {
      "language_model.model.layers.1.block_sparse_moe.experts": {"quant_algo": "NVFP4", "group_size": 16},
      "model.layers.1.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
      "language_model.model.layers.0.self_attn.q_proj": {"quant_algo": "FP8_PB_WO"},
      "model.layers.0.self_attn.fused_qkvg_proj": {"quant_algo": "FP8_PB_WO"},
      "model.layers.3.self_attn.fused_qkv_a_proj_with_mqa": {"quant_algo": "FP9_FUTURE"}
    },
    "exclude_modules": ["*block_sparse_moe.gate*", "*mlp.gate*", "language_model.lm_head"]
  }
})";

ModelOptConfig nested(const std::string& text) {
  return parse_modelopt_hf_quant_config(parse_json(text, "hf_quant_config.json"));
}

InlineQuantConfig inline_config(const std::string& quantization_config) {
  std::optional<InlineQuantConfig> parsed = parse_inline_quant_config(
      parse_json(R"({"model_type": "kimi_linear", "quantization_config": )" + quantization_config + "}", "config.json"));
  EXPECT_TRUE(parsed.has_value());
  return *parsed;
}

std::string inline_error(const std::string& quantization_config) {
  return error_of([&] { inline_config(quantization_config); });
}

TEST(QuantConfig, RealK3CompressedTensorsInsideTextConfig) {
  std::optional<InlineQuantConfig> parsed = parse_inline_quant_config(load_json_file(kK3Config));
  ASSERT_TRUE(parsed.has_value());
  const auto* ct = std::get_if<CompressedTensorsConfig>(&*parsed);
  ASSERT_NE(ct, nullptr);
  EXPECT_EQ(ct->origin.file, kK3Config);
  EXPECT_EQ(ct->origin.path, "text_config.quantization_config");
  EXPECT_EQ(ct->format, "mxfp4-pack-quantized");
  EXPECT_EQ(ct->quantization_status, "compressed");
  ASSERT_EQ(ct->config_groups.size(), 1u);
  const CtConfigGroup& group = ct->config_groups[0];
  EXPECT_EQ(group.name, "group_0");
  EXPECT_EQ(group.targets, (std::vector<std::string>{"Linear"}));
  EXPECT_EQ(group.format, "mxfp4-pack-quantized");
  ASSERT_TRUE(group.weights.has_value());
  const CtQuantArgs& w = *group.weights;
  EXPECT_EQ(w.num_bits, 4);
  EXPECT_EQ(w.type, "float");
  EXPECT_EQ(w.strategy, "group");
  EXPECT_EQ(w.group_size, 32);
  EXPECT_EQ(w.block_structure, std::nullopt);
  EXPECT_TRUE(w.symmetric);
  EXPECT_EQ(w.dynamic, CtDynamic::kStatic);
  EXPECT_EQ(w.scale_dtype, "torch.uint8");
  EXPECT_EQ(w.zp_dtype, std::nullopt);
  EXPECT_EQ(w.actorder, std::nullopt);
  EXPECT_EQ(group.input_activations, std::nullopt);
  EXPECT_EQ(group.output_activations, std::nullopt);
  EXPECT_EQ(ct->ignore, (std::vector<std::string>{"re:.*self_attn.*", "re:.*shared_experts.*",
                                                  "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
                                                  "re:.*vision_tower.*", "re:.*mm_projector.*"}));
  EXPECT_EQ(ct->kv_cache_scheme, std::nullopt);
}

TEST(QuantConfig, NoQuantizationConfig) {
  EXPECT_EQ(parse_inline_quant_config(parse_json(R"({"model_type": "kimi_linear"})", "config.json")), std::nullopt);
  EXPECT_EQ(parse_inline_quant_config(parse_json(R"({"quantization_config": null})", "config.json")), std::nullopt);
  EXPECT_EQ(error_of([] {
              parse_inline_quant_config(parse_json(
                  R"({"quantization_config": {"quant_method": "fp8"}, "text_config": {"quantization_config": {}}})",
                  "config.json"));
            }),
            "config.json: field 'text_config.quantization_config': a second quantization_config (one is also at "
            "the top level)");
}

TEST(QuantConfig, ModelOptNestedHfQuantConfig) {
  ModelOptConfig c = nested(kNestedModelOpt);
  EXPECT_FALSE(c.inline_form);
  EXPECT_EQ(c.origin.file, "hf_quant_config.json");
  EXPECT_EQ(c.origin.path, "");
  EXPECT_EQ(c.quant_method, std::nullopt);
  EXPECT_EQ(c.producer_name, "modelopt");
  EXPECT_EQ(c.producer_version, "0.40.0");
  EXPECT_EQ(c.quant_algo, "MIXED_PRECISION");
  EXPECT_EQ(c.kv_cache_quant_algo, std::nullopt);
  EXPECT_EQ(c.group_size, 16);
  EXPECT_EQ(c.exclude_modules,
            (std::vector<std::string>{"*block_sparse_moe.gate*", "*mlp.gate*", "language_model.lm_head"}));
  ASSERT_TRUE(c.quantized_layers.has_value());
  const std::vector<ModelOptLayer>& layers = *c.quantized_layers;
  ASSERT_EQ(layers.size(), 5u);
  EXPECT_EQ(layers[0].module, "language_model.model.layers.1.block_sparse_moe.experts");
  EXPECT_EQ(layers[0].quant_algo, "NVFP4");
  EXPECT_EQ(layers[0].group_size, 16);
  EXPECT_EQ(layers[1].module, "model.layers.1.mlp.experts");
  EXPECT_EQ(layers[2].module, "language_model.model.layers.0.self_attn.q_proj");
  EXPECT_EQ(layers[2].quant_algo, "FP8_PB_WO");
  EXPECT_EQ(layers[2].group_size, std::nullopt);
  EXPECT_EQ(layers[3].module, "model.layers.0.self_attn.fused_qkvg_proj");
  // An unknown algo is kept as written; the family resolution rejects it.
  EXPECT_EQ(layers[4].quant_algo, "FP9_FUTURE");

  ModelOptConfig fp8 = nested(R"({"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})");
  EXPECT_EQ(fp8.quant_algo, "FP8");
  EXPECT_EQ(fp8.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(fp8.quantized_layers, std::nullopt);
  EXPECT_TRUE(fp8.exclude_modules.empty());
  EXPECT_EQ(fp8.producer_name, std::nullopt);
}

TEST(QuantConfig, ModelOptNestedMalformed) {
  EXPECT_EQ(error_of([] { nested(R"({"producer": {}})"); }),
            "hf_quant_config.json: field 'quantization': missing required field");
  EXPECT_EQ(error_of([] { nested(R"({"quantization": {"quant_algo": null}})"); }),
            "hf_quant_config.json: field 'quantization.quant_algo': must not be null");
  EXPECT_EQ(error_of([] {
              nested(R"({"quantization": {"quant_algo": "MIXED_PRECISION",
                         "quantized_layers": {"model.layers.0.self_attn.q_proj": {"group_size": 16}}}})");
            }),
            "hf_quant_config.json: field 'quantization.quantized_layers[\"model.layers.0.self_attn.q_proj\"]."
            "quant_algo': missing required field");
  EXPECT_EQ(error_of([] {
              nested(R"({"quantization": {"quant_algo": "MIXED_PRECISION",
                         "quantized_layers": {"a.b": {"quant_algo": "NVFP4", "group_size": "16"}}}})");
            }),
            "hf_quant_config.json: field 'quantization.quantized_layers[\"a.b\"].group_size': expected an integer, got "
            "the string \"16\"");
  EXPECT_EQ(error_of([] { nested(R"({"quantization": {"quant_algo": "FP8", "exclude_modules": "lm_head"}})"); }),
            "hf_quant_config.json: field 'quantization.exclude_modules': expected an array, got the string "
            "\"lm_head\"");
  EXPECT_EQ(error_of([] { nested(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 0}})"); }),
            "hf_quant_config.json: field 'quantization.group_size': 0 is out of range [1, 65536]");
  EXPECT_EQ(error_of([] { nested(R"({"producer": "modelopt", "quantization": {"quant_algo": "FP8"}})"); }),
            "hf_quant_config.json: field 'producer': expected an object, got the string \"modelopt\"");
}

TEST(QuantConfig, ModelOptInlineFlatForm) {
  InlineQuantConfig parsed = inline_config(R"({
    "quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION",
    "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": false},
    "quantized_layers": {"z.experts": {"quant_algo": "NVFP4", "group_size": 16}, "a.q_proj": {"quant_algo": "FP8_PB_WO"}},
    "ignore": ["*lm_head*"], "config_groups": {"group_0": {}}, "producer": {"name": "modelopt"}})");
  const auto* c = std::get_if<ModelOptConfig>(&parsed);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->inline_form);
  EXPECT_EQ(c->origin.path, "quantization_config");
  EXPECT_EQ(c->quant_method, "modelopt_mixed");
  EXPECT_EQ(c->quant_algo, "MIXED_PRECISION");
  ASSERT_TRUE(c->kv_cache_scheme.has_value());
  EXPECT_EQ(c->kv_cache_scheme->type, "float");
  EXPECT_EQ(c->kv_cache_scheme->num_bits, 8);
  EXPECT_EQ(c->kv_cache_quant_algo, std::nullopt);
  EXPECT_EQ(c->exclude_modules, (std::vector<std::string>{"*lm_head*"}));
  ASSERT_TRUE(c->quantized_layers.has_value());
  ASSERT_EQ(c->quantized_layers->size(), 2u);
  EXPECT_EQ((*c->quantized_layers)[0].module, "z.experts");
  EXPECT_EQ((*c->quantized_layers)[1].module, "a.q_proj");
  EXPECT_EQ(c->producer_name, "modelopt");

  // Incomplete inline form (no quantized_layers): kept as nullopt so the family can fall back to
  // hf_quant_config.json (spec §2.1).
  const auto incomplete = inline_config(R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"})");
  EXPECT_EQ(std::get<ModelOptConfig>(incomplete).quantized_layers, std::nullopt);

  EXPECT_EQ(inline_error(R"({"quant_method": "modelopt"})"),
            "config.json: field 'quantization_config.quant_algo': missing required field");
  EXPECT_EQ(inline_error(R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": {"type": "float"}})"),
            "config.json: field 'quantization_config.kv_cache_scheme.num_bits': missing required field");
}

TEST(QuantConfig, CompressedTensorsFp8Block) {
  InlineQuantConfig parsed = inline_config(R"({
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {
      "group_0": {"targets": ["Linear"], "format": null,
                  "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
                              "symmetric": true, "dynamic": false, "group_size": null},
                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                                        "symmetric": true, "dynamic": true}},
      "group_1": {"targets": ["re:.*experts.*"],
                  "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
                              "block_structure": "64x32", "dynamic": "local", "actorder": true}}},
    "ignore": ["lm_head", "re:.*gate$"]})");
  const auto* ct = std::get_if<CompressedTensorsConfig>(&parsed);
  ASSERT_NE(ct, nullptr);
  EXPECT_EQ(ct->format, "float-quantized");
  EXPECT_EQ(ct->quantization_status, std::nullopt);
  ASSERT_EQ(ct->config_groups.size(), 2u);
  const CtConfigGroup& g0 = ct->config_groups[0];
  EXPECT_EQ(g0.format, std::nullopt);
  EXPECT_EQ(g0.weights->strategy, "block");
  EXPECT_EQ(g0.weights->block_structure, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(g0.weights->group_size, std::nullopt);
  EXPECT_EQ(g0.weights->dynamic, CtDynamic::kStatic);
  ASSERT_TRUE(g0.input_activations.has_value());
  EXPECT_EQ(g0.input_activations->dynamic, CtDynamic::kDynamic);
  EXPECT_EQ(g0.input_activations->group_size, 128);
  const CtConfigGroup& g1 = ct->config_groups[1];
  EXPECT_EQ(g1.name, "group_1");
  EXPECT_EQ(g1.targets, (std::vector<std::string>{"re:.*experts.*"}));
  EXPECT_EQ(g1.weights->type, "int");
  EXPECT_EQ(g1.weights->block_structure, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(g1.weights->dynamic, CtDynamic::kLocal);
  EXPECT_EQ(g1.weights->actorder, "group");
  EXPECT_TRUE(g1.weights->symmetric);  // absent: the library default
  EXPECT_EQ(ct->ignore, (std::vector<std::string>{"lm_head", "re:.*gate$"}));
}

TEST(QuantConfig, CompressedTensorsMalformed) {
  const std::string head = R"({"quant_method": "compressed-tensors", )";
  EXPECT_EQ(inline_error(head + R"("format": "pack-quantized"})"),
            "config.json: field 'quantization_config.config_groups': missing required field");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": "Linear"}}})"),
            "config.json: field 'quantization_config.config_groups.g.targets': expected an array, got the string "
            "\"Linear\"");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": "4", "type": "float"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.num_bits': expected an integer, got the "
            "string \"4\"");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.type': missing required field");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "block_structure": [128]}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.block_structure': expected two block "
            "dimensions, got 1");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "block_structure": "4294967296x128"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.block_structure': 4294967296 is out of "
            "range [1, 65536]");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "block_structure": "99999999999999999999x128"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.block_structure': expected \"ROWSxCOLS\" or "
            "[rows, cols], got \"99999999999999999999x128\"");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "group_size": 4294967328}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.group_size': 4294967328 is out of range "
            "[1, 65536]");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4294967304,
                                   "type": "float"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.num_bits': 4294967304 is out of range "
            "[1, 64]");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "block_structure": "128by128"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.block_structure': expected \"ROWSxCOLS\" or "
            "[rows, cols], got \"128by128\"");
  EXPECT_EQ(inline_error(head + R"("config_groups": {"g": {"targets": [], "weights": {"num_bits": 4, "type": "float",
                                   "dynamic": "global"}}}})"),
            "config.json: field 'quantization_config.config_groups.g.weights.dynamic': expected true, false or "
            "\"local\", got \"global\"");
  EXPECT_EQ(inline_error(head + R"("config_groups": {}, "ignore": ["a", 3]})"),
            "config.json: field 'quantization_config.ignore[1]': expected a string, got 3");
}

TEST(QuantConfig, DeepSeekFp8Block) {
  InlineQuantConfig parsed = inline_config(
      R"({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]})");
  const auto* fp8 = std::get_if<Fp8Config>(&parsed);
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(fp8->activation_scheme, "dynamic");
  EXPECT_EQ(fp8->fmt, "e4m3");
  EXPECT_EQ(fp8->weight_block_size, std::make_pair(int64_t{128}, int64_t{128}));
  EXPECT_TRUE(fp8->ignored_layers.empty());

  InlineQuantConfig per_tensor = inline_config(
      R"({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"],
          "modules_to_not_convert": ["gate"]})");
  EXPECT_EQ(std::get<Fp8Config>(per_tensor).weight_block_size, std::nullopt);
  EXPECT_EQ(std::get<Fp8Config>(per_tensor).ignored_layers, (std::vector<std::string>{"lm_head", "gate"}));

  EXPECT_EQ(inline_error(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 0]})"),
            "config.json: field 'quantization_config.weight_block_size[1]': 0 is out of range [1, 65536]");
  // Values past 32 bits are refused, not truncated (2^32 + 128 would otherwise act as 128).
  EXPECT_EQ(inline_error(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [4294967296, 128]})"),
            "config.json: field 'quantization_config.weight_block_size[0]': 4294967296 is out of range [1, 65536]");
  EXPECT_EQ(inline_error(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [4294967424, 128]})"),
            "config.json: field 'quantization_config.weight_block_size[0]': 4294967424 is out of range [1, 65536]");
  EXPECT_EQ(inline_error(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128, 1]})"),
            "config.json: field 'quantization_config.weight_block_size': expected two block dimensions, got 3");
  EXPECT_EQ(inline_error(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})"),
            "config.json: field 'quantization_config.activation_scheme': missing required field");
}

TEST(QuantConfig, UnknownMethodIsKeptMissingMethodIsAnError) {
  InlineQuantConfig parsed = inline_config(R"({"quant_method": "awq", "bits": 4})");
  const auto* unknown = std::get_if<UnknownQuantConfig>(&parsed);
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->quant_method, "awq");
  EXPECT_EQ(unknown->origin.path, "quantization_config");
  EXPECT_EQ(inline_error(R"({"bits": 4})"), "config.json: field 'quantization_config.quant_method': missing required field");
  EXPECT_EQ(inline_error(R"(["fp8"])"), "config.json: field 'quantization_config': expected an object, got an array");
}

TEST(QuantConfig, ModelSlimDescription) {
  ModelSlimConfig c = parse_modelslim_description(parse_json(R"({
    "model_quant_type": "W4A8_DYNAMIC", "version": "1.0.0", "group_size": 256,
    "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight": "W4A8_DYNAMIC",
    "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale": "W4A8_DYNAMIC",
    "language_model.model.layers.3.self_attn.kv_b_proj.weight": "FLOAT",
    "language_model.model.layers.0.self_attn.q_proj.weight": "W8A8_DYNAMIC",
    "language_model.model.layers.0.mlp.down_proj.weight": "W8A8",
    "language_model.model.layers.0.self_attn.g_proj.weight": "W4A4_MXFP4_NEW",
    "ignore": ["lm_head"],
    "packed_modules_mapping": {"model": {"fused_qkvg_proj": ["q_proj", "k_proj", "v_proj", "g_proj"]},
                               "gate_up_proj": ["gate_proj", "up_proj"]}
  })", "quant_model_description.json"));
  EXPECT_EQ(c.origin.file, "quant_model_description.json");
  EXPECT_EQ(c.model_quant_type, "W4A8_DYNAMIC");
  EXPECT_EQ(c.version, "1.0.0");
  EXPECT_EQ(c.group_size, 256);
  ASSERT_EQ(c.tensor_schemes.size(), 6u);
  EXPECT_EQ(c.tensor_schemes[0],
            std::make_pair(std::string("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight"),
                           std::string("W4A8_DYNAMIC")));
  EXPECT_EQ(c.tensor_schemes[2].second, "FLOAT");
  EXPECT_EQ(c.tensor_schemes[3].second, "W8A8_DYNAMIC");
  EXPECT_EQ(c.tensor_schemes[4].second, "W8A8");
  EXPECT_EQ(c.tensor_schemes[5].second, "W4A4_MXFP4_NEW");  // kept; resolution rejects what it does not know
  EXPECT_EQ(c.ignore, (std::vector<std::string>{"lm_head"}));
  ASSERT_EQ(c.packed_modules_mapping.size(), 2u);
  EXPECT_EQ(c.packed_modules_mapping[0].scope, "model");
  EXPECT_EQ(c.packed_modules_mapping[0].fused, "fused_qkvg_proj");
  EXPECT_EQ(c.packed_modules_mapping[0].shards, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "g_proj"}));
  EXPECT_EQ(c.packed_modules_mapping[1].scope, "");
  EXPECT_EQ(c.packed_modules_mapping[1].fused, "gate_up_proj");

  ModelSlimConfig minimal =
      parse_modelslim_description(parse_json(R"({"a.weight": "FLOAT"})", "quant_model_description.json"));
  EXPECT_EQ(minimal.version, std::nullopt);
  EXPECT_EQ(minimal.group_size, std::nullopt);
  EXPECT_EQ(minimal.model_quant_type, std::nullopt);
}

TEST(QuantConfig, ModelSlimMalformed) {
  auto slim_error = [](const std::string& text) {
    return error_of([&] { parse_modelslim_description(parse_json(text, "quant_model_description.json")); });
  };
  EXPECT_EQ(slim_error(R"({"version": 1.0})"),
            "quant_model_description.json: field 'version': expected a string, got 1.0");
  EXPECT_EQ(slim_error(R"({"a.weight": 8})"),
            "quant_model_description.json: field '[\"a.weight\"]': expected a string, got 8");
  EXPECT_EQ(slim_error(R"({"group_size": -1})"),
            "quant_model_description.json: field 'group_size': -1 is out of range [0, 65536]");
  EXPECT_EQ(slim_error(R"({"group_size": 4294967360})"),
            "quant_model_description.json: field 'group_size': 4294967360 is out of range [0, 65536]");
  EXPECT_EQ(slim_error(R"({"group_size": 4294967296})"),
            "quant_model_description.json: field 'group_size': 4294967296 is out of range [0, 65536]");
  EXPECT_EQ(slim_error(R"({"packed_modules_mapping": {"qkv_proj": "q_proj"}})"),
            "quant_model_description.json: field 'packed_modules_mapping.qkv_proj': expected a list of shard names or "
            "an object of such lists");
  EXPECT_EQ(slim_error(R"(["W8A8"])"), "quant_model_description.json: expected an object, got an array");
}

TEST(QuantConfig, LoadersNameTheFile) {
  const std::string path = ::testing::TempDir() + "k3_hf_quant_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << kNestedModelOpt;
  EXPECT_EQ(load_modelopt_hf_quant_config(path).quantized_layers->size(), 5u);
  std::ofstream(path) << R"({"quantization": {"quant_algo": 7}})";
  EXPECT_EQ(error_of([&] { load_modelopt_hf_quant_config(path); }),
            path + ": field 'quantization.quant_algo': expected a string, got 7");
  std::ofstream(path) << R"({"x.weight": true})";
  EXPECT_EQ(error_of([&] { load_modelslim_description(path); }),
            path + ": field '[\"x.weight\"]': expected a string, got true");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace k3
