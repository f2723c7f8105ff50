// Block-FP8 family: DeepSeek-style planning (`weight_scale_inv`) and the make-tiny writer of both
// block-FP8 spellings (compressed-tensors FP8-block is planned by compressed_tensors.cpp).
#include "quant/families/fp8_block.h"

#include "model/tiny_config.h"
#include "quant/families/checkpoint_writer.h"
#include "quant/families/compressed_tensors.h"
#include "quant/families/family.h"
#include "quant/families/quantized_linear.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/fp8/fp8_plan.h"

namespace k3 {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An `ignored_layers` / `modules_to_not_convert` entry keeps a module dense when it occurs in the
// module's name, as transformers' FP8 replacement tests `key in module_name` [UNCONFIRMED: vLLM
// compares whole layer names; a substring test keeps every module either of them keeps].
bool deepseek_ignores(const std::string& entry, const std::string& module) { return module.find(entry) != std::string::npos; }

QuantizedLayout deepseek_layout(const CheckpointDir& ckpt, std::vector<std::string>& ignored) {
  const std::optional<InlineQuantConfig> q = parse_inline_quant_config(*ckpt.config_json);
  const auto* fp8 = q ? std::get_if<Fp8Config>(&*q) : nullptr;
  if (fp8 == nullptr) throw Error(Where{ckpt.path("config.json"), "", ""}, "no fp8 quantization_config");
  const auto where = [fp8](const std::string& key) { return Where{fp8->origin.file, "", fp8->origin.path + "." + key}; };
  if (fp8->activation_scheme != "dynamic") {
    throw Error(where("activation_scheme"),
                "unsupported activation_scheme '" + fp8->activation_scheme + "' (block FP8 quantizes activations dynamically)");
  }
  if (fp8->fmt && *fp8->fmt != "e4m3") throw Error(where("fmt"), "unsupported fmt '" + *fp8->fmt + "' (expected 'e4m3')");
  if (!fp8->weight_block_size) throw Error(where("weight_block_size"), "missing weight_block_size (per-tensor fp8 is not a block format)");
  ignored = fp8->ignored_layers;
  return fp8_block_layout(static_cast<uint32_t>(fp8->weight_block_size->first),
                          static_cast<uint32_t>(fp8->weight_block_size->second), "weight_scale_inv");
}

}  // namespace

bool fp8_block_producer_quantizes(const ParamSpec& spec) {
  return is_linear_module(spec) && spec.group != ParamGroup::Head;
}

bool fp8_block_dequantized_to_bf16_at_load(const std::string& param) {
  for (const char* name : {"self_attn.f_a_proj.weight", "self_attn.f_b_proj.weight", "self_attn.b_proj.weight",
                           "self_attn.kv_b_proj.weight"}) {
    if (ends_with(param, std::string(".") + name)) return true;
  }
  return false;
}

void add_fp8_block_load_transforms(Binding& b) {
  if (b.scheme.kind == SchemeKind::Fp8Block && fp8_block_dequantized_to_bf16_at_load(b.param)) {
    b.transforms.push_back(Transform::DequantToBf16);
  }
}

Json deepseek_fp8_quantization_config() {
  return {{"activation_scheme", "dynamic"},
          {"fmt", "e4m3"},
          {"quant_method", "fp8"},
          {"weight_block_size", Json::array({kFp8BlockSize, kFp8BlockSize})}};
}

WritePlan write_plan_fp8_block_checkpoint(Fp8BlockStyle style, const FloatSource& source, Json config_doc) {
  const bool deepseek = style == Fp8BlockStyle::DeepSeek;
  text_config_of(config_doc)["quantization_config"] =
      deepseek ? deepseek_fp8_quantization_config() : ct_fp8_block_quantization_config();
  const std::string scale_suffix = deepseek ? "weight_scale_inv" : "weight_scale";
  constexpr int64_t kB = kFp8BlockSize;
  SafetensorsPlanBuilder out(source);
  for (const auto& spec : source.params()) {
    if (!fp8_block_producer_quantizes(spec)) {
      out.add_unquantized(spec, Dtype::BF16);
      continue;
    }
    const bool bank = spec.kind == ParamKind::ExpertBank;
    const uint64_t count = bank ? spec.shape[0] : 1, n = spec.shape[bank ? 1 : 0], k = spec.shape[bank ? 2 : 1];
    const uint64_t nb = (n + kB - 1) / kB, kb = (k + kB - 1) / kB;
    for (uint64_t e = 0; e < count; ++e) {
      const int64_t expert = bank ? static_cast<int64_t>(e) : -1;
      const auto name = [&](const std::string& suffix) {
        return bank ? expert_tensor_name(spec.name, expert, suffix)
                    : spec.name.substr(0, spec.name.size() - 6) + suffix;  // "…weight" → "…<suffix>"
      };
      const std::vector<size_t> ids = {out.declare(name("weight"), Dtype::F8_E4M3, {n, k}),
                                       out.declare(name(scale_suffix), Dtype::F32, {nb, kb})};
      out.add_unit(unit_label(spec, expert), "FP8_BLOCK", ids, [&source, spec, expert, n, k, nb, kb] {
        const std::vector<float> w = source.read(spec, expert);
        std::vector<uint8_t> q(n * k);
        std::vector<float> scale(nb * kb);
        quantize_fp8_block(w.data(), static_cast<int64_t>(n), static_cast<int64_t>(k), kB, kB, q.data(), scale.data());
        return payloads(std::move(q), f32_bytes(scale.data(), scale.size()));
      });
    }
  }
  return out.build(std::move(config_doc));
}

void write_fp8_block_checkpoint(Fp8BlockStyle style, const MasterWeights& master, Json config_doc, const std::string& out_dir) {
  run_write_plan(write_plan_fp8_block_checkpoint(style, MasterSource(master), std::move(config_doc)), out_dir);
}

namespace family {

LoadPlan plan_fp8_block(const CheckpointDir& ckpt) {
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json");
  std::vector<std::string> ignored;
  const QuantizedLayout layout = deepseek_layout(ckpt, ignored);

  LoadPlan plan;
  plan.family = family_name(FamilyId::Fp8Block);
  // The producer quantizes every Linear but lm_head, the latent projections included.
  plan.caps.quantized_latent_projections = true;
  const SafetensorsCheckpoint st = SafetensorsCheckpoint::open(ckpt.dir);
  TensorBinder binder(st, plan);
  plan.params = parameter_inventory(*ckpt.config);
  const ModuleRuleFn rule = [&](const std::string& module) {
    for (const auto& entry : ignored) {
      if (deepseek_ignores(entry, module)) return ModuleRule{layout, "ignored_layers entry '" + entry + "'"};
    }
    return ModuleRule{layout, ""};
  };
  for (const auto& spec : plan.params) {
    Binding b = bind_linear_or_dense(binder, spec, rule);
    add_fp8_block_load_transforms(b);
    plan.bindings.push_back(std::move(b));
  }
  binder.finish();
  return plan;
}

WritePlan write_plan_fp8_block(const FloatSource& source, Json config_doc) {
  return write_plan_fp8_block_checkpoint(Fp8BlockStyle::DeepSeek, source, std::move(config_doc));
}

}  // namespace family
}  // namespace k3
