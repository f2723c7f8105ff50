// compressed-tensors checkpoints: the native Kimi-K3 release (format "mxfp4-pack-quantized",
// routed experts packed, spec arch §9.1/§9.3, formats §7) and FP8-block (format
// "float-quantized", weights strategy "block"). The quantization_config sits inside text_config
// for kimi-k3 and at the top level for kimi-linear.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "io/json.h"
#include "quant/families/quantized_linear.h"
#include "quant/quant_config.h"

namespace k3 {

// The config resolved to one rule per module, matching as compressed-tensors does
// (compressed_tensors/utils/match.py): a target or ignore entry "re:<regex>" matches a module
// name from its start (Python re.match: anchored at the start, not at the end), any other entry
// matches the exact module name or the module's class ("Linear"). Among config groups the most
// specific match wins: exact name, then regex, then class; ties go to the first group in file
// order. A module matched by an ignore entry, or by no group, must stay unquantized; any other
// module may be stored quantized or dense, and the checkpoint's tensors say which
// (bind_linear_or_dense). This is how the K3 release reads: its config targets every Linear and
// does not ignore the router or the latent projections, yet stores them BF16 (spec §9.1).
class CtModuleRules {
 public:
  // Throws k3::Error at the config key for what k3 cannot serve: a format other than
  // mxfp4-pack-quantized / float-quantized, weights arguments that do not fit the format (MXFP4:
  // 4-bit float, strategy group, group 32, uint8 scales; FP8: 8-bit float, strategy block with a
  // block_structure), static input activation scales, asymmetric weights, a quantization_status
  // other than "compressed", an invalid regular expression.
  explicit CtModuleRules(const CompressedTensorsConfig& config);

  // The rule for an nn.Linear module, named as the checkpoint spells it
  // ("language_model.model.layers.1.block_sparse_moe.experts.0.w1").
  ModuleRule rule(const std::string& module) const;

 private:
  struct Target {
    std::string text;
    std::optional<std::regex> regex;
  };
  struct Group {
    std::vector<Target> targets;
    QuantizedLayout layout;
  };
  static int match_rank(const Target& target, const std::string& module);

  std::vector<Group> groups_;
  std::vector<Target> ignore_;
};

// The quantization_config of the Kimi-K3 release, key for key (fixtures/real-configs).
Json ct_mxfp4_release_quantization_config();
// What the release stores packed: the routed experts only (spec arch §9.1); all else BF16/F32.
bool ct_mxfp4_release_packs(const ParamSpec& spec);

// llm-compressor's FP8_BLOCK preset as compressed-tensors serialises it: weights 8-bit float,
// strategy block [128, 128], static; inputs 8-bit float, dynamic, per group of 128.
Json ct_fp8_block_quantization_config();

}  // namespace k3
