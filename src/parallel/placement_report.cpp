#include "parallel/placement_report.h"

#include <cstdarg>
#include <cstdio>

#include "parallel/sharding.h"

namespace k3 {
namespace {

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

double gbytes(double b) { return b / 1e9; }

// The rule of a group as its parameters follow it: one split, or "mixed" (e.g. KDA: heads split,
// f_a replicated, o_proj by columns).
std::string group_rule(ParamGroup group) {
  switch (group) {
    case ParamGroup::Embedding: return "TP rows (vocabulary)";
    case ParamGroup::Head: return "TP rows (vocabulary)";
    case ParamGroup::Norm:
    case ParamGroup::AttnRes:
    case ParamGroup::Router: return "replicated";
    case ParamGroup::Kda: return "TP by head (f_a, o_norm replicated)";
    case ParamGroup::Mla: return "TP by head (q_a, kv_a replicated)";
    case ParamGroup::DenseMlp:
    case ParamGroup::Shared: return "TP by channel";
    case ParamGroup::Latent: return "TP by latent channel";
    case ParamGroup::Experts: return "EP";
  }
  return "?";
}

std::string host_line(const Placement& p) {
  if (p.machine.host_bytes == 0) return "host memory: none given\n";
  std::string out = format("host memory: %.1f GB per node given; routed experts there: ", gbytes(static_cast<double>(p.machine.host_bytes)));
  for (size_t n = 0; n < p.host_bytes.size(); ++n) out += format("%snode %zu %.1f GB", n ? ", " : "", n, gbytes(static_cast<double>(p.host_bytes[n])));
  if (p.streams_experts()) out += format(" (pinned; copied over PCIe when picked, %.2f GB staging per GPU)", gbytes(static_cast<double>(p.staging_bytes)));
  if (p.cpu_computes_experts()) out += format(" (computed by the CPU at %.0f GB/s)", p.machine.cpu_bps / 1e9);
  return out + "\n";
}

bool same_gpu(const GpuPlacement& a, const GpuPlacement& b) {
  return a.weight_bytes == b.weight_bytes && a.experts == b.experts && a.resident_experts == b.resident_experts &&
         a.host_expert_bytes == b.host_expert_bytes && a.free_bytes == b.free_bytes;
}

}  // namespace

std::string placement_table(const Placement& p, const std::vector<DecodeEstimate>& decode) {
  const Machine& m = p.machine;
  const DeviceKind& dev = *m.device;
  std::string out;
  out += format("machine    %s: tensor parallel %lld (the GPUs of a node), expert parallel %lld (all GPUs)%s\n", m.describe().c_str(),
                static_cast<long long>(p.tp), static_cast<long long>(p.ep),
                m.nodes > 1 ? "; nodes are data-parallel replicas of all but the routed experts" : "");
  out += format("device     %s: %.1f GB, HBM %.2f TB/s read (datasheet %.2f), %.0f TFLOP/s bf16, NVLink %.0f GB/s, PCIe %.1f GB/s per direction",
                dev.name, gbytes(static_cast<double>(dev.memory_bytes)), dev.hbm_read_bps / 1e12, dev.hbm_peak_bps / 1e12,
                dev.bf16_flops / 1e12, dev.nvlink_bps / 1e9, dev.pcie_bps / 1e9);
  out += m.nodes > 1 ? format("; network %.0f GB/s per GPU\n", m.network_bps / 1e9) : std::string("\n");
  out += format("model      %.2f GB (%s, %s); routed experts %.2f GB = %lld MoE layers x %lld experts x %.2f MB\n\n",
                gbytes(static_cast<double>(p.model_bytes)), p.family.c_str(), p.from_layout ? "laid out from the config" : "from the headers",
                gbytes(static_cast<double>(p.group_bytes[static_cast<size_t>(ParamGroup::Experts)])), static_cast<long long>(p.moe_layers),
                static_cast<long long>(p.num_experts), p.moe_layers ? gbytes(static_cast<double>(p.expert_bytes)) * 1e3 / static_cast<double>(p.moe_layers) : 0.0);

  out += format("  %-16s %-36s %12s %12s\n", "group", "rule", "model GB", "GPU 0 GB");
  const GpuPlacement& g0 = p.gpus.front();
  for (size_t i = 0; i < kParamGroups; ++i) {
    if (p.group_bytes[i] == 0) continue;
    const ParamGroup group = static_cast<ParamGroup>(i);
    std::string rule = group_rule(group);
    if (group == ParamGroup::Experts) rule = format("EP: %lld per layer on GPU 0, %lld resident", static_cast<long long>(g0.experts), static_cast<long long>(g0.resident_experts));
    out += format("  %-16s %-36s %12.2f %12.2f\n", param_group_name(group), rule.c_str(), gbytes(static_cast<double>(p.group_bytes[i])),
                  gbytes(static_cast<double>(g0.group_bytes[i])));
  }
  out += "\n";
  out += format("  %-9s %-10s %10s %-24s %10s %10s %10s\n", "GPUs", "node", "weights GB", "experts/layer (resident)", "host GB", "state GB", "free GB");
  for (size_t i = 0; i < p.gpus.size();) {
    size_t j = i + 1;
    while (j < p.gpus.size() && same_gpu(p.gpus[i], p.gpus[j])) ++j;
    const GpuPlacement& g = p.gpus[i];
    const std::string ids = j - i == 1 ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j - 1);
    const std::string nodes = p.gpus[j - 1].node == g.node ? std::to_string(g.node) : std::to_string(g.node) + "-" + std::to_string(p.gpus[j - 1].node);
    const std::string experts = format("%lld (%lld)", static_cast<long long>(g.experts), static_cast<long long>(g.resident_experts));
    out += format("  %-9s %-10s %10.2f %-24s %10.2f %10.2f %10.2f\n", ids.c_str(), nodes.c_str(), gbytes(static_cast<double>(g.weight_bytes)),
                  experts.c_str(), gbytes(static_cast<double>(g.host_expert_bytes)), gbytes(static_cast<double>(g.state_bytes)),
                  gbytes(static_cast<double>(g.free_bytes)));
    i = j;
  }
  out += host_line(p);

  const uint64_t kda_gpu = p.state.kda_bytes_per_sequence / static_cast<uint64_t>(p.tp);
  const uint64_t per_seq = kda_gpu + p.state.mla_bytes_per_token * static_cast<uint64_t>(p.options.context);
  const uint64_t free = g0.free_bytes;
  out += format("state      MLA latent cache %llu B per token (whole on every GPU of a node); KDA state %.1f MB per sequence, %.1f MB per GPU\n",
                static_cast<unsigned long long>(p.state.mla_bytes_per_token), static_cast<double>(p.state.kda_bytes_per_sequence) / 1e6,
                static_cast<double>(kda_gpu) / 1e6);
  out += format("reserved   %lld sequences x %lld tokens per node (%.2f GB per GPU), runtime %.2f GB per GPU\n",
                static_cast<long long>(p.planned_sequences), static_cast<long long>(p.options.context), gbytes(static_cast<double>(g0.state_bytes)),
                gbytes(static_cast<double>(kRuntimeReserveBytes)));
  out += format("free       GPU 0: %.2f GB = %llu more tokens of MLA cache, or %llu more KDA state slots, or %llu more sequences of %lld tokens\n\n",
                gbytes(static_cast<double>(free)), static_cast<unsigned long long>(p.state.mla_bytes_per_token ? free / p.state.mla_bytes_per_token : 0),
                static_cast<unsigned long long>(kda_gpu ? free / kda_gpu : 0), static_cast<unsigned long long>(per_seq ? free / per_seq : 0),
                static_cast<long long>(p.options.context));

  out += format("decode estimate per step on the busiest GPU (uniform routing, %lld-token sequences; step = max(HBM, compute) + links + host + latency)\n",
                static_cast<long long>(p.options.context));
  out += format("  %5s %8s %8s %7s %8s %8s %8s %8s %7s %7s %7s %7s %7s %8s %9s %9s\n", "batch", "experts", "HBM GB", "TFLOP", "NVL MB", "net MB",
                "PCIe GB", "CPU GB", "HBM ms", "flop ms", "link ms", "host ms", "lat ms", "step ms", "tok/s", "overlap");
  for (const DecodeEstimate& d : decode) {
    if (!d.fits) {
      out += format("  %5lld  exceeds the %lld sequences per node the plan reserves state for\n", static_cast<long long>(d.batch),
                    static_cast<long long>(p.planned_sequences));
      continue;
    }
    out += format("  %5lld %8.1f %8.2f %7.2f %8.1f %8.1f %8.2f %8.2f %7.2f %7.2f %7.2f %7.2f %7.2f %8.2f %9.1f %9.1f\n",
                  static_cast<long long>(d.batch), d.experts_touched, gbytes(d.hbm_bytes()), d.flops / 1e12,
                  (d.allreduce_bytes + d.a2a_nvlink_bytes) / 1e6, d.network_bytes / 1e6, gbytes(d.pcie_bytes), gbytes(d.cpu_bytes),
                  d.memory_s * 1e3, d.compute_s * 1e3, (d.nvlink_s + d.network_s) * 1e3, (d.pcie_s + d.cpu_s) * 1e3, d.latency_s * 1e3,
                  d.step_seconds() * 1e3, d.tokens_per_second(), d.overlap_tokens_per_second());
  }
  return out;
}

Json placement_json(const Placement& p, const std::vector<DecodeEstimate>& decode) {
  const Machine& m = p.machine;
  const DeviceKind& dev = *m.device;
  Json groups = Json::array();
  for (size_t i = 0; i < kParamGroups; ++i) {
    if (p.group_bytes[i] == 0) continue;
    groups.push_back({{"group", param_group_name(static_cast<ParamGroup>(i))}, {"rule", group_rule(static_cast<ParamGroup>(i))},
                      {"bytes", p.group_bytes[i]}});
  }
  Json gpus = Json::array();
  for (size_t i = 0; i < p.gpus.size(); ++i) {
    const GpuPlacement& g = p.gpus[i];
    Json by_group = Json::object();
    for (size_t j = 0; j < kParamGroups; ++j) {
      if (g.group_bytes[j]) by_group[param_group_name(static_cast<ParamGroup>(j))] = g.group_bytes[j];
    }
    gpus.push_back({{"gpu", i}, {"node", g.node}, {"rank", g.rank}, {"weight_bytes", g.weight_bytes}, {"groups", by_group},
                    {"experts", {{"first", g.first_expert}, {"count", g.experts}, {"resident", g.resident_experts}}},
                    {"host_expert_bytes", g.host_expert_bytes}, {"state_bytes", g.state_bytes}, {"free_bytes", g.free_bytes}});
  }
  Json rows = Json::array();
  for (const DecodeEstimate& d : decode) {
    rows.push_back({{"batch", d.batch}, {"fits", d.fits}, {"node_tokens", d.node_tokens}, {"experts_touched", d.experts_touched},
                    {"dests_in_node", d.dests_in_node}, {"dests_off_node", d.dests_off_node},
                    {"bytes", {{"hbm_weights", d.weight_bytes}, {"hbm_experts", d.expert_bytes}, {"hbm_state", d.state_bytes},
                               {"nvlink_allreduce", d.allreduce_bytes}, {"nvlink_all_to_all", d.a2a_nvlink_bytes},
                               {"network", d.network_bytes}, {"pcie", d.pcie_bytes}, {"host_read", d.host_read_bytes}, {"cpu", d.cpu_bytes}}},
                    {"flops", d.flops},
                    {"seconds", {{"memory", d.memory_s}, {"compute", d.compute_s}, {"nvlink", d.nvlink_s}, {"network", d.network_s},
                                 {"pcie", d.pcie_s}, {"cpu", d.cpu_s}, {"latency", d.latency_s}, {"step", d.step_seconds()}}},
                    {"tokens_per_second", d.tokens_per_second()}, {"overlap_tokens_per_second", d.overlap_tokens_per_second()}});
  }
  Json host = Json::array();
  for (uint64_t b : p.host_bytes) host.push_back(b);
  return {{"machine",
           {{"device", dev.name}, {"gpus_per_node", m.gpus_per_node}, {"nodes", m.nodes}, {"host_bytes_per_node", m.host_bytes},
            {"cpu_experts", m.cpu_experts}, {"memory_bytes", dev.memory_bytes}, {"hbm_read_bps", dev.hbm_read_bps},
            {"hbm_peak_bps", dev.hbm_peak_bps}, {"bf16_flops", dev.bf16_flops}, {"nvlink_bps", dev.nvlink_bps}, {"pcie_bps", dev.pcie_bps},
            {"network_bps", m.network_bps}, {"cpu_bps", m.cpu_bps}, {"runtime_reserve_bytes", kRuntimeReserveBytes}}},
          {"tensor_parallel", p.tp},
          {"expert_parallel", p.ep},
          {"model_bytes", p.model_bytes},
          {"from_layout", p.from_layout},
          {"groups", groups},
          {"expert", {{"layers", p.moe_layers}, {"experts", p.num_experts}, {"per_token", p.experts_per_token}, {"bytes_all_layers", p.expert_bytes}}},
          {"state", {{"mla_bytes_per_token", p.state.mla_bytes_per_token}, {"kda_bytes_per_sequence", p.state.kda_bytes_per_sequence},
                     {"context", p.options.context}, {"planned_sequences_per_node", p.planned_sequences}}},
          {"gpus", gpus},
          {"host_expert_bytes", host},
          {"streams_experts", p.streams_experts()},
          {"decode", rows}};
}

}  // namespace k3
