#include "quant/families/family.h"

#include <filesystem>

#include "io/file.h"
#include "io/path_error.h"

namespace k3 {
namespace fs = std::filesystem;

namespace {

struct FamilyEntry {
  FamilyId id;
  const char* name;
};
constexpr FamilyEntry kFamilies[] = {
    {FamilyId::Bf16, "bf16"},
    {FamilyId::ModelOptMixed, "modelopt-mixed"},
    {FamilyId::ModelOptNvfp4, "modelopt-nvfp4"},
    {FamilyId::ModelOptFp8, "modelopt-fp8"},
    {FamilyId::CompressedTensorsMxfp4, "compressed-tensors-mxfp4"},
    {FamilyId::Fp8Block, "fp8-block"},
    {FamilyId::ModelSlimW4A8, "modelslim-w4a8"},
    {FamilyId::Gguf, "gguf"},
    {FamilyId::GgufExpertPack, "gguf-expert-pack"},
};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// quantization_config lives at the top of config.json or, in the real K3 release, under text_config.
std::optional<JsonNode> quantization_config(const JsonNode& root) {
  if (auto q = root.find("quantization_config"); q && !q->is_null()) return q;
  if (auto text = root.find("text_config"); text && text->is_object()) {
    if (auto q = text->find("quantization_config"); q && !q->is_null()) return q;
  }
  return std::nullopt;
}

FamilyId modelopt_variant(const std::string& algo, const Where& where) {
  const std::string a = upper(algo);
  if (a == "MIXED_PRECISION") return FamilyId::ModelOptMixed;
  if (a == "NVFP4") return FamilyId::ModelOptNvfp4;
  if (a == "FP8") return FamilyId::ModelOptFp8;
  throw Error(where, "unknown ModelOpt quant_algo '" + algo + "'");
}

FamilyId detect_family(const CheckpointDir& c) {
  bool has_gguf = false;
  for (const auto& e : fs::directory_iterator(c.dir)) has_gguf |= e.path().extension() == ".gguf";
  if (has_gguf) return c.has_file("expert_pack_manifest.json") ? FamilyId::GgufExpertPack : FamilyId::Gguf;
  if (c.has_file("quant_model_description.json")) return FamilyId::ModelSlimW4A8;
  if (c.has_file("hf_quant_config.json")) {
    const JsonNode doc = load_json_file(c.path("hf_quant_config.json"));
    return modelopt_variant(doc.at("quantization").required<std::string>("quant_algo"),
                            doc.at("quantization").at("quant_algo").where());
  }
  if (!c.config_json) return FamilyId::Bf16;
  const std::optional<JsonNode> q = quantization_config(*c.config_json);
  if (!q) return FamilyId::Bf16;
  const std::string method = q->required<std::string>("quant_method");
  if (method.rfind("modelopt", 0) == 0) return modelopt_variant(q->required<std::string>("quant_algo"), q->at("quant_algo").where());
  if (method == "compressed-tensors") {
    const std::string format = q->optional<std::string>("format").value_or("");
    return format.find("mxfp4") != std::string::npos ? FamilyId::CompressedTensorsMxfp4 : FamilyId::Fp8Block;
  }
  if (method == "fp8") return FamilyId::Fp8Block;
  q->at("quant_method").fail("unknown quant_method '" + method + "'");
}

}  // namespace

const char* family_name(FamilyId id) {
  for (const auto& f : kFamilies) {
    if (f.id == id) return f.name;
  }
  return "?";
}

FamilyId parse_family(const std::string& name) {
  for (const auto& f : kFamilies) {
    if (name == f.name) return f.id;
  }
  std::string known;
  for (const auto& f : kFamilies) known += std::string(known.empty() ? "" : ", ") + f.name;
  throw Error(Where{"", "", "--family"}, "unknown family '" + name + "' (expected one of " + known + ")");
}

std::vector<FamilyId> all_families() {
  std::vector<FamilyId> out;
  for (const auto& f : kFamilies) out.push_back(f.id);
  return out;
}

std::string CheckpointDir::path(const std::string& name) const { return (fs::path(dir) / name).string(); }

bool CheckpointDir::has_file(const std::string& name) const {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path(name), ec));
}

bool is_safetensors_checkpoint_file(const std::string& name) {
  return name != kMasterWeightsName && (fs::path(name).extension() == ".safetensors" || name == "model.safetensors.index.json");
}

void refuse_mixed_checkpoint(const std::string& dir) {
  std::string safetensors, gguf;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path& p = e.path();
    const bool is_st = is_safetensors_checkpoint_file(p.filename().string());
    std::string& slot = is_st ? safetensors : gguf;
    if (is_st || p.extension() == ".gguf") {
      if (slot.empty() || p.filename().string() < slot) slot = p.filename().string();
    }
  }
  if (!safetensors.empty() && !gguf.empty()) {
    throw Error(Where{dir, "", ""}, "holds both a safetensors checkpoint (" + safetensors + ") and a GGUF checkpoint (" + gguf +
                                        "): keep one per directory");
  }
}

CheckpointDir open_checkpoint_dir(const std::string& dir) {
  try {
    if (!fs::is_directory(dir)) throw Error(Where{dir, "", ""}, "not a checkpoint directory");
    CheckpointDir c;
    c.dir = dir;
    refuse_mixed_checkpoint(dir);
    if (c.has_file("config.json")) {
      c.config_json = load_json_file(c.path("config.json"));
      c.config = parse_k3_config(*c.config_json);
    }
    c.family = detect_family(c);
    return c;
  } catch (const fs::filesystem_error& e) {
    throw path_error(e, dir);
  }
}

LoadPlan plan_checkpoint(const std::string& dir) { return plan_checkpoint(open_checkpoint_dir(dir)); }

LoadPlan plan_checkpoint(const CheckpointDir& c) {
  switch (c.family) {
    case FamilyId::Bf16: return family::plan_dense(c);
    case FamilyId::ModelOptMixed:
    case FamilyId::ModelOptNvfp4:
    case FamilyId::ModelOptFp8: return family::plan_modelopt(c);
    case FamilyId::CompressedTensorsMxfp4: return family::plan_compressed_tensors(c);
    case FamilyId::Fp8Block:
      return c.config_json && quantization_config(*c.config_json)->required<std::string>("quant_method") == "fp8"
                 ? family::plan_fp8_block(c)
                 : family::plan_compressed_tensors(c);
    case FamilyId::ModelSlimW4A8: return family::plan_modelslim(c);
    case FamilyId::Gguf:
    case FamilyId::GgufExpertPack: return family::plan_gguf(c);
  }
  throw Error(Where{c.dir, "", ""}, "unhandled family");
}

}  // namespace k3
