// ModelOpt per-module algorithm resolution (spec k3-quant-formats.md §2.1–§2.2): which quant_algo
// a runtime module gets from `quantized_layers` and `exclude_modules`. Pure functions of the config
// values; no files. Errors (disagreeing spellings or fused shards, partly excluded fused layers)
// are thrown as k3::Error without a location; the planner turns them into plan problems.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "quant/quant_config.h"

namespace k3::modelopt {

// Per-layer algos the resolution accepts (sglang's set, compared upper-cased).
inline constexpr const char* kKnownAlgos[] = {"NVFP4", "FP8", "FP8_PB_WO", "MXFP8", "W4A16_NVFP4"};

std::string upper(std::string s);
// The upper-cased algo when it is one of kKnownAlgos, else nullopt.
std::optional<std::string> known_algo(const std::string& written);
// "NVFP4, FP8, FP8_PB_WO, MXFP8 or W4A16_NVFP4", for messages.
std::string known_algos_text();

// Every spelling of a logical module name the ModelOpt K3 converter writes: X, language_model.X,
// the bare name without "model." and each of them with block_sparse_moe <-> mlp. X comes first.
std::vector<std::string> module_spellings(const std::string& module);

// ModelOpt's glob: "*" matches any run of characters (dots included), everything else is literal;
// the whole text must match.
bool glob_full_match(const std::string& pattern, const std::string& text);

// A fused runtime module and its shards (K3's packed_modules_mapping, spec §2.2, plus MLA's
// fused_qkv_a_proj_with_mqa, which resolves by a direct entry).
struct PackedModule {
  std::string fused;
  std::vector<std::string> shards;
};
const std::vector<PackedModule>& k3_packed_modules();

class Resolver {
 public:
  Resolver(std::vector<ModelOptLayer> quantized_layers, std::vector<std::string> exclude_modules);

  // is_layer_excluded over every spelling of the module: full match, per-segment match, and the
  // fused-MLA special case (a pattern ending in q_a_proj / q_b_proj / kv_a_proj_with_mqa /
  // kv_b_proj excludes a module whose last segment contains that name).
  bool excluded(const std::string& module) const;

  // The entry of the module itself under any spelling (upper-cased algo), nullopt when none.
  // Throws when two spellings carry different algos.
  std::optional<std::string> direct(const std::string& module) const;
  // The first quantized_layers key (file order) inside the module's subtree ("<spelling>.…").
  std::optional<std::string> subtree(const std::string& module) const;
  // direct, then subtree; nullopt = unquantized. Exclusion is not consulted.
  std::optional<std::string> resolve(const std::string& module) const;

  // Checks a fused module `<base>.<fused>` whose present shards are `<base>.<shard>`: the shards
  // are all excluded or none ("Some but not all shards …"), and the algos of the non-excluded
  // shards and of a direct entry for the fused name agree (an unquantized shard counts as "none")
  // ("Mixed quant_algo within fused layer …"). Throws on violation.
  void check_fused(const std::string& base, const PackedModule& packed, const std::vector<std::string>& present_shards) const;

 private:
  std::vector<ModelOptLayer> layers_;
  std::vector<std::string> exclude_;
};

}  // namespace k3::modelopt
