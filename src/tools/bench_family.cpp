#include "tools/bench_family.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "io/json.h"
#include "model/known_configs.h"
#include "model/tiny_config.h"
#include "quant/families/family_writer.h"
#include "quant/families/float_source.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {
namespace fs = std::filesystem;

// The config.json document --synthetic names: a known config's text, or the file's.
Json config_document(const std::string& synthetic) {
  if (const std::optional<std::string> text = known_config_json(synthetic)) return parse_json(*text, synthetic + " (built in)").value();
  return load_json_file(synthetic).value();
}

// The document of the config's first `layers` layers: num_hidden_layers and the 1-based layer lists
// of linear_attn_config cut to them; an AttnRes block longer than the layers shortened to them (the
// same blocks: one, sealed at layer 0).
void keep_first_layers_of_document(Json& doc, int64_t layers) {
  Json& text = text_config_of(doc);
  text["num_hidden_layers"] = layers;
  if (text.contains("attn_res_block_size") && text["attn_res_block_size"].is_number_integer() &&
      text["attn_res_block_size"].get<int64_t>() > layers) {
    text["attn_res_block_size"] = layers;
  }
  if (!text.contains("linear_attn_config") || !text["linear_attn_config"].is_object()) return;
  for (const char* key : {"kda_layers", "full_attn_layers"}) {
    Json& list = text["linear_attn_config"][key];
    if (!list.is_array()) continue;
    Json kept = Json::array();
    for (const Json& v : list) {
      if (v.is_number_integer() && v.get<int64_t>() <= layers) kept.push_back(v);
    }
    list = kept;
  }
}

std::string fresh_folder(const std::string& scratch) {
  std::error_code ec;
  const fs::path base = scratch.empty() ? fs::temp_directory_path(ec) : fs::path(scratch);
  if (ec || !fs::is_directory(base, ec)) throw Error(Where{base.string(), "", "--scratch"}, "is not a folder");
  std::string templ = (base / "k3-bench-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) throw Error(Where{base.string(), "", "--scratch"}, "cannot create a folder in it");
  return templ;
}

}  // namespace

SampleCheckpoint::SampleCheckpoint(FamilyId family, const std::string& synthetic, int64_t layers, uint64_t seed,
                                   int64_t template_experts, const std::string& scratch, const QuantizeOptions& quantize,
                                   const RoutingSkew& routing) {
  K3Config config = resolve_synthetic_config(synthetic);
  cli::keep_first_layers(config, layers);
  Json doc = without_quantization_config(config_document(synthetic));
  if (layers > 0) keep_first_layers_of_document(doc, layers);
  dir_ = fresh_folder(scratch);
  const auto t0 = std::chrono::steady_clock::now();
  write_family_sample(family, SeededSource(config, seed, routing), doc, dir_, template_experts, quantize);
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CheckpointDir ckpt = open_checkpoint_dir(dir_);
  if (!ckpt.config || ckpt.config->mixer != config.mixer || ckpt.config->ffn != config.ffn) {
    throw Error(Where{dir_, "", "config.json"}, "internal: the sample's layers are not the config's first " + std::to_string(layers));
  }
  config_ = *ckpt.config;
  plan_ = plan_checkpoint(ckpt);
  if (!plan_.ok()) throw Error(plan_.problems.front().where, "internal: the sample does not plan: " + plan_.problems.front().message);
  alias_template_experts(plan_, template_experts);
  footprint_ = footprint_of(plan_);
  files_ = std::make_unique<PlanFiles>(plan_);
}

SampleCheckpoint::~SampleCheckpoint() {
  files_.reset();
  std::error_code ignored;
  if (!dir_.empty()) fs::remove_all(dir_, ignored);
}

}  // namespace k3::cli
