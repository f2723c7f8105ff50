#include "parallel/placement.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "parallel/sharding.h"

namespace k3 {
namespace {

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

[[noreturn]] void refuse(const std::string& why) { throw Error(Where{"", "", "--devices"}, "does not fit: " + why); }

size_t group_index(ParamGroup g) { return static_cast<size_t>(g); }

// The MoE layers' per-expert bytes and multiply-adds, summed over layers (banks hold E equal experts).
void add_expert_bank(Placement& p, const ParamFootprint& f) {
  const uint64_t E = f.spec.shape[0];
  if (f.bytes % E != 0) {
    throw Error(Where{"", f.spec.name, ""}, "internal: " + std::to_string(f.bytes) + " bytes are not " + std::to_string(E) + " equal experts");
  }
  p.expert_bytes += f.bytes / E;
  p.expert_macs += f.spec.shape[1] * f.spec.shape[2];
}

// TP shares of a non-expert parameter on every rank of a node (all nodes alike).
void add_tp_parameter(Placement& p, const ParamFootprint& f) {
  const ShardRule rule = shard_rule(f.spec);
  const int64_t t = p.tp;
  if (rule.split == Split::kRows || rule.split == Split::kColumns) {
    const size_t axis = rule.split == Split::kRows ? 0 : 1;
    const uint64_t n = f.spec.shape.at(axis);
    if (n % static_cast<uint64_t>(t) != 0) {
      throw Error(Where{"", f.spec.name, "--devices"}, std::string("cannot split its ") + rule.axis + " (dim " + std::to_string(axis) +
                                                           " = " + std::to_string(n) + ") among " + std::to_string(t) +
                                                           " GPUs of a node");
    }
  } else {
    p.replicated_bytes += f.bytes;
  }
  const bool linear = f.spec.kind == ParamKind::Linear;
  const uint64_t macs = linear ? f.spec.numel() / (rule.split == Split::kReplicate ? 1 : static_cast<uint64_t>(t)) : 0;
  for (GpuPlacement& g : p.gpus) {
    const uint64_t share = shard_bytes(f.bytes, rule.split, t, g.rank);
    g.group_bytes[group_index(f.spec.group)] += share;
    g.weight_bytes += share;
    if (f.spec.kind != ParamKind::Embedding) g.step_read_bytes += share;
    g.macs_per_token += macs;
  }
}

}  // namespace

StateGeometry state_geometry(const K3Config& c) {
  StateGeometry s;
  const uint64_t mla = static_cast<uint64_t>(c.count(MixerKind::kMla)), kda = static_cast<uint64_t>(c.count(MixerKind::kKda));
  s.mla_bytes_per_token = static_cast<uint64_t>(c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) * 2 * mla;
  const uint64_t H = static_cast<uint64_t>(c.kda.num_heads), D = static_cast<uint64_t>(c.kda.head_dim);
  const uint64_t conv = 3 * static_cast<uint64_t>(c.kda.projection_dim()) * static_cast<uint64_t>(c.kda.short_conv_kernel_size - 1) * 2;
  s.kda_bytes_per_sequence = (H * D * D * 4 + conv) * kda;
  return s;
}

bool Placement::streams_experts() const {
  return !machine.cpu_experts && std::any_of(host_bytes.begin(), host_bytes.end(), [](uint64_t b) { return b > 0; });
}

bool Placement::cpu_computes_experts() const {
  return machine.cpu_experts && std::any_of(host_bytes.begin(), host_bytes.end(), [](uint64_t b) { return b > 0; });
}

Placement plan_placement(const Footprint& fp, const K3Config& c, const Machine& m, const PlanOptions& o) {
  if (!m.device || m.gpus_per_node < 1 || m.nodes < 1) throw Error(Where{"", "", "--devices"}, "no devices");
  if (o.batches.empty() || o.context < 1) throw Error(Where{"", "", "--batch"}, "needs a batch size and a context of at least 1");
  Placement p;
  p.machine = m;
  p.options = o;
  p.family = fp.family;
  p.from_layout = fp.from_layout;
  p.tp = m.gpus_per_node;
  p.ep = m.gpus();
  p.model_bytes = fp.total_bytes();
  p.group_bytes.assign(kParamGroups, 0);
  p.layers = c.num_layers;
  p.moe_layers = c.count(FfnKind::kMoe);
  p.num_experts = c.moe ? c.moe->num_experts : 0;
  p.experts_per_token = c.moe ? c.moe->experts_per_token : 0;
  p.expert_width = c.moe && c.moe->routed_expert_hidden_size ? *c.moe->routed_expert_hidden_size : c.hidden_size;
  p.state = state_geometry(c);
  const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  p.planned_sequences = (max_batch + m.nodes - 1) / m.nodes;

  const int64_t G = p.ep, E = p.num_experts;
  for (int64_t g = 0; g < G; ++g) {
    GpuPlacement gpu;
    gpu.node = g / p.tp;
    gpu.rank = g % p.tp;
    gpu.group_bytes.assign(kParamGroups, 0);
    const IndexRange range = split_range(E, G, g);
    gpu.first_expert = range.first;
    gpu.experts = range.count;
    p.gpus.push_back(gpu);
  }
  for (const ParamFootprint& f : fp.params) {
    p.group_bytes[group_index(f.spec.group)] += f.bytes;
    if (f.spec.kind == ParamKind::ExpertBank) {
      add_expert_bank(p, f);
    } else {
      if (f.spec.kind == ParamKind::Embedding) p.embedding_row_bytes = f.bytes / f.spec.shape[0];
      add_tp_parameter(p, f);
    }
  }

  // Before any routed expert: TP weights, the runtime reserve, the planned sequences' state.
  const uint64_t capacity = m.device->memory_bytes;
  const uint64_t kda_share = p.state.kda_bytes_per_sequence / static_cast<uint64_t>(p.tp);
  const uint64_t per_sequence = kda_share + p.state.mla_bytes_per_token * static_cast<uint64_t>(o.context);
  const uint64_t state = per_sequence * static_cast<uint64_t>(p.planned_sequences);
  const uint64_t dense = p.gpus.front().weight_bytes;
  for (GpuPlacement& g : p.gpus) g.state_bytes = state;
  if (dense + kRuntimeReserveBytes + state > capacity) {
    refuse("each " + std::string(m.device->name) + " needs " + gb(dense + kRuntimeReserveBytes + state) +
           " before any routed expert (non-expert weights " + gb(dense) + ", runtime reserve " + gb(kRuntimeReserveBytes) +
           ", state of " + std::to_string(p.planned_sequences) + " sequences × " + std::to_string(o.context) + " tokens " + gb(state) +
           ") and holds " + gb(capacity) + "; use more GPUs per node, a smaller --batch or --context");
  }

  // Routed experts: as many of each GPU's range as fit, the same count in every MoE layer.
  const bool host = m.host_bytes > 0;
  p.staging_bytes = host && !m.cpu_experts && p.moe_layers > 0 ? static_cast<uint64_t>(p.experts_per_token) * (p.expert_bytes / static_cast<uint64_t>(p.moe_layers)) : 0;
  p.host_bytes.assign(static_cast<size_t>(m.nodes), 0);
  uint64_t expert_total = 0, expert_room = 0;
  for (GpuPlacement& g : p.gpus) {
    const uint64_t used = g.weight_bytes + kRuntimeReserveBytes + state;
    const uint64_t room = capacity - used;
    const uint64_t whole_range = static_cast<uint64_t>(g.experts) * p.expert_bytes;
    const uint64_t room_with_staging = room > p.staging_bytes ? room - p.staging_bytes : 0;
    const int64_t fit = p.expert_bytes ? static_cast<int64_t>(room_with_staging / p.expert_bytes) : g.experts;
    g.resident_experts = whole_range <= room ? g.experts : std::min(g.experts, fit);
    const uint64_t resident = static_cast<uint64_t>(g.resident_experts) * p.expert_bytes;
    g.host_expert_bytes = static_cast<uint64_t>(g.experts - g.resident_experts) * p.expert_bytes;
    g.group_bytes[group_index(ParamGroup::Experts)] += resident;
    g.weight_bytes += resident;
    g.free_bytes = capacity - used - resident - (g.host_expert_bytes ? p.staging_bytes : 0);
    p.host_bytes[static_cast<size_t>(g.node)] += g.host_expert_bytes;
    expert_total += whole_range;
    expert_room += std::min(room, whole_range);
  }
  const uint64_t spill = *std::max_element(p.host_bytes.begin(), p.host_bytes.end());
  if (spill > 0 && !host) {
    refuse("the routed experts take " + gb(expert_total) + " and the " + m.describe() + " GPUs have room for " + gb(expert_room) +
           " of them beside everything else (" + gb(expert_total - expert_room) +
           " short); add --host-memory, --nodes or devices");
  }
  if (spill > m.host_bytes) {
    refuse(gb(spill) + " of routed experts must live in each node's host memory and --host-memory gives " + gb(m.host_bytes));
  }
  return p;
}

}  // namespace k3
