// Checkpoint families: each is a small module that maps a checkpoint's tensors to the parameter
// inventory (planning, headers only) and can write a checkpoint of its kind from a float model
// (family_writer.h: `k3 make-tiny`, `k3 quantize`). The family is detected from the files present, never guessed from content.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/json.h"
#include "model/config.h"
#include "model/parameters.h"
#include "quant/families/master.h"
#include "quant/plan/load_plan.h"

namespace k3 {

enum class FamilyId {
  Bf16,                    // dense HF safetensors (BF16/F16/F32), sharded or not
  ModelOptMixed,           // ModelOpt MIXED_PRECISION: NVFP4 experts + FP8_PB_WO attention
  ModelOptNvfp4,           // ModelOpt single-algo NVFP4
  ModelOptFp8,             // ModelOpt single-algo FP8 (per-tensor)
  CompressedTensorsMxfp4,  // compressed-tensors mxfp4-pack-quantized (the native K3 release)
  Fp8Block,                // 128×128 block FP8: DeepSeek-style weight_scale_inv or compressed-tensors
  ModelSlimW4A8,           // ModelSlim quant_model_description.json
  Gguf,                    // llama.cpp GGUF (kimi-k3 / kimi-linear naming), split shards
  GgufExpertPack,          // GGUF + Kimi GGML MoE ExpertPack (routed experts from the pack)
};

const char* family_name(FamilyId id);  // the make-tiny spelling: "bf16", "modelopt-mixed", …
FamilyId parse_family(const std::string& name);
std::vector<FamilyId> all_families();

// A checkpoint directory as planners see it. Configs are parsed; no tensor file is opened yet.
struct CheckpointDir {
  std::string dir;
  std::optional<JsonNode> config_json;  // config.json, when present
  std::optional<K3Config> config;       // parsed from config.json, when present
  FamilyId family = FamilyId::Bf16;

  std::string path(const std::string& name) const;  // dir + "/" + name
  // True when `name` exists in the directory, whatever its type (opening it refuses a non-regular file).
  bool has_file(const std::string& name) const;
};

// The float master `k3 make-tiny` writes beside a checkpoint of any family: not checkpoint data.
inline constexpr char kMasterWeightsName[] = "master.safetensors";
// A file of a safetensors checkpoint: *.safetensors (not the master) or model.safetensors.index.json.
bool is_safetensors_checkpoint_file(const std::string& name);
// Throws k3::Error naming one file of each when `dir` holds both a safetensors checkpoint and a
// GGUF one (*.gguf): which one a tool loads must not depend on the tool.
void refuse_mixed_checkpoint(const std::string& dir);

// Reads config files and detects the family. Throws k3::Error for unreadable or invalid configs.
CheckpointDir open_checkpoint_dir(const std::string& dir);

// The whole plan: every parameter bound once, every tensor consumed or reported, all problems.
// Reads headers and configs only (File::payload_maps() does not change).
LoadPlan plan_checkpoint(const std::string& dir);
LoadPlan plan_checkpoint(const CheckpointDir& ckpt);

// Writes a checkpoint of `family` from the master into out_dir (created), with the config.json
// `config_doc` plus the family's own quantization config, as the real releases lay them out
// (write_family of family_writer.h over the master: the one writer of each family).
void write_family_checkpoint(FamilyId family, const MasterWeights& master, const Json& config_doc,
                             const std::string& out_dir);

// The per-family planners (one module each under quant/families/; their writers: family_writer.h).
namespace family {
LoadPlan plan_dense(const CheckpointDir& ckpt);
LoadPlan plan_modelopt(const CheckpointDir& ckpt);
LoadPlan plan_compressed_tensors(const CheckpointDir& ckpt);  // MXFP4 and FP8-block
LoadPlan plan_fp8_block(const CheckpointDir& ckpt);  // DeepSeek-style weight_scale_inv
LoadPlan plan_modelslim(const CheckpointDir& ckpt);
LoadPlan plan_gguf(const CheckpointDir& ckpt);  // GGUF and GGUF + ExpertPack
}  // namespace family

}  // namespace k3
