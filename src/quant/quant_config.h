// Typed parsing of the quantization configs that sit next to (or inside) a checkpoint's
// config.json. Types and structure only: which parameter gets which scheme is decided later by the
// family modules. Algorithm / scheme / format names are kept as the strings written, so that an
// unknown one reaches the family resolution (which rejects it by name); a malformed structure
// (wrong type, missing key) is a k3::Error naming the file and key path here.
// Spec: k3-quant-formats.md §2.1 (ModelOpt), §4.1 (ModelSlim), §7 and k3-architecture.md §9
// (compressed-tensors MXFP4); DeepSeek-style "fp8" block configs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/json.h"

namespace k3 {

// Bounds on the integers of a quantization config. Real group and block sizes are 16 to 128; the
// bound keeps every count derived from them (scales per row, blocks per matrix) in 32 bits.
inline constexpr int64_t kMaxQuantBlockDim = int64_t{1} << 16;  // group_size, block dimensions
inline constexpr int64_t kMaxQuantBits = 64;                      // num_bits

// Where a config was read: the file and the key path inside it ("" for a whole file such as
// hf_quant_config.json, "text_config.quantization_config" for the K3 release).
struct QuantConfigOrigin {
  std::string file;
  std::string path;
};

// ---- ModelOpt (spec §2.1), both locations ------------------------------------------------------
struct ModelOptLayer {
  std::string module;                 // key of quantized_layers, as written
  std::string quant_algo;             // as written: "NVFP4", "FP8_PB_WO", ...
  std::optional<int64_t> group_size;
};

// The flat form's kv_cache_scheme ({"type": "float", "num_bits": 8, ...}).
struct ModelOptKvCacheScheme {
  std::string type;
  int64_t num_bits = 0;
};

struct ModelOptConfig {
  QuantConfigOrigin origin;
  bool inline_form = false;                   // config.json quantization_config (flat form)
  std::optional<std::string> quant_method;    // flat form: "modelopt", "modelopt_mixed", ...
  std::optional<std::string> producer_name;
  std::optional<std::string> producer_version;
  std::string quant_algo;                     // "MIXED_PRECISION", "NVFP4", "FP8", ...
  std::optional<std::string> kv_cache_quant_algo;       // nested form; null -> nullopt
  std::optional<ModelOptKvCacheScheme> kv_cache_scheme;  // flat form; null -> nullopt
  std::optional<int64_t> group_size;
  std::vector<std::string> exclude_modules;   // nested exclude_modules / flat ignore (globs)
  // In file order (resolution takes the first subtree hit). nullopt when the key is absent: an
  // incomplete inline config then defers to hf_quant_config.json (spec §2.1).
  std::optional<std::vector<ModelOptLayer>> quantized_layers;
};

// ---- compressed-tensors (k3-architecture.md §1, §9.3) --------------------------------------------
enum class CtDynamic { kStatic, kDynamic, kLocal };  // `dynamic`: false, true or "local"

struct CtQuantArgs {
  int64_t num_bits = 0;
  std::string type;                               // "float", "int"
  std::optional<std::string> strategy;            // "group", "block", "channel", "tensor", "token"
  std::optional<int64_t> group_size;
  std::optional<std::vector<int64_t>> block_structure;  // e.g. [128, 128] ("128x128" accepted)
  bool symmetric = true;
  CtDynamic dynamic = CtDynamic::kStatic;
  std::optional<std::string> scale_dtype;         // e.g. "torch.uint8" (E8M0 bytes)
  std::optional<std::string> zp_dtype;
  std::optional<std::string> actorder;            // "group", "weight", ...; true is written as "group"
};

struct CtConfigGroup {
  std::string name;                               // "group_0", ...
  std::vector<std::string> targets;               // class names ("Linear") or "re:" regexes
  std::optional<std::string> format;
  std::optional<CtQuantArgs> weights;
  std::optional<CtQuantArgs> input_activations;
  std::optional<CtQuantArgs> output_activations;
};

struct CompressedTensorsConfig {
  QuantConfigOrigin origin;
  std::optional<std::string> format;              // "mxfp4-pack-quantized", "float-quantized", ...
  std::optional<std::string> quantization_status;  // "compressed", ...
  std::vector<CtConfigGroup> config_groups;       // file order
  std::vector<std::string> ignore;                // module names or "re:" regexes, as written
  std::optional<CtQuantArgs> kv_cache_scheme;
};

// ---- DeepSeek-style FP8 (quant_method "fp8") --------------------------------------------------
struct Fp8Config {
  QuantConfigOrigin origin;
  std::string activation_scheme;                  // "dynamic" / "static"
  std::optional<std::string> fmt;                 // "e4m3"
  // [rows, cols] of one weight scale block (DeepSeek: [128, 128]); nullopt: per-tensor scales.
  std::optional<std::pair<int64_t, int64_t>> weight_block_size;
  std::vector<std::string> ignored_layers;        // ignored_layers + modules_to_not_convert
};

struct UnknownQuantConfig {
  QuantConfigOrigin origin;
  std::string quant_method;
};

using InlineQuantConfig = std::variant<ModelOptConfig, CompressedTensorsConfig, Fp8Config, UnknownQuantConfig>;

// ---- ModelSlim quant_model_description.json (spec §4.1) ---------------------------------------
struct ModelSlimPacking {
  std::string scope;                 // "" for a flat mapping, else the sub-map name (e.g. "model")
  std::string fused;                 // runtime module, e.g. "fused_qkvg_proj"
  std::vector<std::string> shards;   // e.g. q_proj, k_proj, v_proj, g_proj
};

struct ModelSlimConfig {
  QuantConfigOrigin origin;
  std::optional<std::string> model_quant_type;  // informational, e.g. "W4A8_DYNAMIC"
  std::optional<std::string> version;           // "1.0.0" selects the packed int4 layout
  std::optional<int64_t> group_size;            // absent: per-channel scales
  // Tensor name -> scheme string ("W4A8_DYNAMIC", "W8A8_DYNAMIC", "W8A8", "FLOAT", ...), file order.
  std::vector<std::pair<std::string, std::string>> tensor_schemes;
  std::vector<std::string> ignore;
  std::vector<ModelSlimPacking> packed_modules_mapping;
};

// hf_quant_config.json (nested ModelOpt form). `root` is the whole file.
ModelOptConfig parse_modelopt_hf_quant_config(const JsonNode& root);
ModelOptConfig load_modelopt_hf_quant_config(const std::string& path);

// A quantization_config object, dispatched on quant_method.
InlineQuantConfig parse_quantization_config(const JsonNode& node);
// The quantization_config of a config.json `root`: at the top level or (K3 release) inside
// text_config; nullopt when there is none; an error when both exist.
std::optional<InlineQuantConfig> parse_inline_quant_config(const JsonNode& root);

ModelSlimConfig parse_modelslim_description(const JsonNode& root);
ModelSlimConfig load_modelslim_description(const std::string& path);

}  // namespace k3
