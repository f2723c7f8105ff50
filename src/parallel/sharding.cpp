#include "parallel/sharding.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"

namespace k3 {
namespace {

// The module part a rule keys on: the last name component, ".weight" dropped
// ("model.layers.3.self_attn.q_proj.weight" → "q_proj", "…self_attn.A_log" → "A_log").
std::string_view key_of(std::string_view name) {
  constexpr std::string_view kWeight = ".weight";
  if (name.ends_with(kWeight)) name.remove_suffix(kWeight.size());
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

struct Entry {
  ParamGroup group;
  std::string_view key;  // "" = every parameter of the group
  ShardRule rule;
};

constexpr ShardRule kReplicated{Split::kReplicate, ""};
constexpr ShardRule kHeads{Split::kRows, "heads"};
constexpr ShardRule kHeadInputs{Split::kColumns, "heads"};
constexpr ShardRule kChannels{Split::kRows, "channels"};
constexpr ShardRule kChannelInputs{Split::kColumns, "channels"};

constexpr Entry kRules[] = {
    {ParamGroup::Embedding, "", {Split::kRows, "vocabulary"}},
    {ParamGroup::Head, "", {Split::kRows, "vocabulary"}},
    {ParamGroup::Norm, "", kReplicated},
    {ParamGroup::AttnRes, "", kReplicated},
    // KDA (spec §6): per-head projections, gates and conv channels split by head; o_proj's inputs.
    {ParamGroup::Kda, "q_proj", kHeads},
    {ParamGroup::Kda, "k_proj", kHeads},
    {ParamGroup::Kda, "v_proj", kHeads},
    {ParamGroup::Kda, "g_proj", kHeads},
    {ParamGroup::Kda, "g_b_proj", kHeads},
    {ParamGroup::Kda, "f_b_proj", kHeads},
    {ParamGroup::Kda, "b_proj", kHeads},
    {ParamGroup::Kda, "q_conv1d", kHeads},
    {ParamGroup::Kda, "k_conv1d", kHeads},
    {ParamGroup::Kda, "v_conv1d", kHeads},
    {ParamGroup::Kda, "dt_bias", kHeads},
    {ParamGroup::Kda, "A_log", kHeads},  // narrowed to num_heads first (it may be stored padded)
    {ParamGroup::Kda, "f_a_proj", kReplicated},
    {ParamGroup::Kda, "g_a_proj", kReplicated},
    {ParamGroup::Kda, "o_norm", kReplicated},
    {ParamGroup::Kda, "o_proj", kHeadInputs},
    // MLA (spec §5): the shared low-rank front replicated (every rank keeps the whole latent cache),
    // the per-head expansions split by head, o_proj's inputs.
    {ParamGroup::Mla, "q_a_proj", kReplicated},
    {ParamGroup::Mla, "q_a_layernorm", kReplicated},
    {ParamGroup::Mla, "kv_a_proj_with_mqa", kReplicated},
    {ParamGroup::Mla, "kv_a_layernorm", kReplicated},
    {ParamGroup::Mla, "q_b_proj", kHeads},
    {ParamGroup::Mla, "q_proj", kHeads},
    {ParamGroup::Mla, "kv_b_proj", kHeads},
    {ParamGroup::Mla, "g_proj", kHeads},
    {ParamGroup::Mla, "o_proj", kHeadInputs},
    // Gated MLPs (dense layer 0 and the shared experts): gate/up by channel, down's inputs.
    {ParamGroup::DenseMlp, "gate_proj", kChannels},
    {ParamGroup::DenseMlp, "up_proj", kChannels},
    {ParamGroup::DenseMlp, "down_proj", kChannelInputs},
    {ParamGroup::Shared, "gate_proj", kChannels},
    {ParamGroup::Shared, "up_proj", kChannels},
    {ParamGroup::Shared, "down_proj", kChannelInputs},
    // The router is replicated: every rank computes the same fp32 top-k from the same bits.
    {ParamGroup::Router, "", kReplicated},
    // Latent MoE (spec §7.2): the down projection and the norm weight by latent channel, the up
    // projection's inputs; the routed sum is reduced per latent channel before the norm.
    {ParamGroup::Latent, "routed_expert_down_proj", {Split::kRows, "latent channels"}},
    {ParamGroup::Latent, "routed_expert_norm", {Split::kRows, "latent channels"}},
    {ParamGroup::Latent, "routed_expert_up_proj", {Split::kColumns, "latent channels"}},
    {ParamGroup::Experts, "", {Split::kExperts, "experts"}},
};

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::kReplicate: return "replicated";
    case Split::kRows: return "TP rows";
    case Split::kColumns: return "TP columns";
    case Split::kExperts: return "EP";
  }
  return "?";
}

ShardRule shard_rule(const ParamSpec& spec) {
  const std::string_view key = key_of(spec.name);
  for (const Entry& e : kRules) {
    if (e.group == spec.group && (e.key.empty() || e.key == key)) return e.rule;
  }
  throw Error(Where{"", spec.name, ""}, "no tensor/expert-parallel partitioning rule covers this parameter");
}

uint64_t shard_bytes(uint64_t bytes, Split split, int64_t t, int64_t rank) {
  if (split != Split::kRows && split != Split::kColumns) return bytes;
  const uint64_t n = static_cast<uint64_t>(t), r = static_cast<uint64_t>(rank);
  return bytes / n + (r < bytes % n ? 1 : 0);
}

IndexRange split_range(int64_t n, int64_t parts, int64_t part) {
  const int64_t per = n / parts, extra = n % parts;
  return {part * per + std::min(part, extra), per + (part < extra ? 1 : 0)};
}

int64_t split_owner(int64_t index, int64_t n, int64_t parts) {
  const int64_t per = n / parts, extra = n % parts;
  const int64_t in_larger = extra * (per + 1);  // indices of the parts that hold one more
  return index < in_larger ? index / (per + 1) : extra + (index - in_larger) / per;
}

}  // namespace k3
