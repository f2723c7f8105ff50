#include "parallel/roofline.h"

#include <algorithm>
#include <cmath>

namespace k3 {

double expected_distinct_experts(double experts, double k, double batch) {
  if (experts <= 0) return 0;
  return experts * (1.0 - std::pow(1.0 - k / experts, batch));
}

double prob_untouched(int64_t experts, int64_t k, int64_t m) {
  if (m <= 0) return 1.0;
  if (experts - m < k) return 0.0;
  double p = 1.0;
  for (int64_t i = 0; i < k; ++i) p *= static_cast<double>(experts - m - i) / static_cast<double>(experts - i);
  return p;
}

double DecodeEstimate::step_seconds() const {
  return std::max(memory_s, compute_s) + nvlink_s + network_s + pcie_s + cpu_s + latency_s;
}

double DecodeEstimate::tokens_per_second() const { return static_cast<double>(batch) / step_seconds(); }

double DecodeEstimate::overlap_tokens_per_second() const {
  return static_cast<double>(batch) / std::max({memory_s, compute_s, nvlink_s, network_s, pcie_s, cpu_s});
}

DecodeEstimate estimate_decode(const Placement& p, const K3Config& c, int64_t batch) {
  DecodeEstimate d;
  const Machine& m = p.machine;
  const double B = static_cast<double>(batch), t = static_cast<double>(p.tp);
  const double E = static_cast<double>(p.num_experts), k = static_cast<double>(p.experts_per_token);
  const double L_moe = static_cast<double>(p.moe_layers), A2 = static_cast<double>(p.expert_width) * 2;
  d.batch = batch;
  d.node_tokens = std::ceil(B / static_cast<double>(m.nodes));
  d.fits = d.node_tokens <= static_cast<double>(p.planned_sequences);
  const double Bn = d.node_tokens;
  const double touched = expected_distinct_experts(E, k, B) / std::max(E, 1.0);  // P(an expert is touched)
  d.experts_touched = touched * E;

  // The busiest GPU: GPU 0 owns the most experts (ranges differ by at most one) and gathers logits.
  const GpuPlacement& g = p.gpus.front();
  const double expert = static_cast<double>(p.expert_bytes);
  const double resident = static_cast<double>(g.resident_experts);
  const double offloaded = static_cast<double>(g.experts - g.resident_experts);
  const bool streams = p.streams_experts(), cpu = p.cpu_computes_experts();
  double node_offloaded = 0;  // experts of node 0 in host memory, per MoE layer
  for (const GpuPlacement& h : p.gpus) {
    const double reach = 1.0 - prob_untouched(p.num_experts, p.experts_per_token, h.experts);
    (h.node == 0 ? d.dests_in_node : d.dests_off_node) += reach;
    if (h.node == 0) node_offloaded += static_cast<double>(h.experts - h.resident_experts);
  }

  // HBM: weights once per step, the touched experts the GPU runs, each sequence's state.
  d.weight_bytes = static_cast<double>(g.step_read_bytes) + Bn * static_cast<double>(p.embedding_row_bytes);
  d.expert_bytes = (resident + (streams ? offloaded : 0.0)) * touched * expert;
  d.state_bytes = Bn * (2.0 * static_cast<double>(p.state.kda_bytes_per_sequence) / t +
                        static_cast<double>(p.state.mla_bytes_per_token) * static_cast<double>(p.options.context));

  // FLOPs: the linears held, the experts run here, MLA absorbed attention over the cache, the KDA recurrence.
  const double gpu_experts = cpu ? resident : static_cast<double>(g.experts);
  const double mla_core = 2.0 * static_cast<double>(p.options.context) * static_cast<double>(c.mla.num_heads) / t *
                          static_cast<double>(2 * c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) *
                          static_cast<double>(c.count(MixerKind::kMla));
  const double D = static_cast<double>(c.kda.head_dim);
  const double kda_core = 8.0 * D * D * static_cast<double>(c.kda.num_heads) / t * static_cast<double>(c.count(MixerKind::kKda));
  d.flops = Bn * (2.0 * static_cast<double>(g.macs_per_token) + mla_core + kda_core) +
            (E > 0 ? 2.0 * B * k * gpu_experts / E * static_cast<double>(p.expert_macs) : 0.0);

  // NVLink: ring all-reduces of the hidden state (after every mixer, after every FFN, after the
  // embedding lookup), the latent norm's sum of squares, the logits gathered to rank 0; and the
  // expert dispatch + combine between GPUs of a node (each TP rank sends its 1/t latent slice).
  const bool latent_norm = c.moe && c.moe->routed_expert_hidden_size && c.moe->latent_moe_use_norm;
  const double norm_reductions = latent_norm ? L_moe : 0.0;
  const double hidden_reductions = 2.0 * static_cast<double>(p.layers) + 1.0;
  if (p.tp > 1) {
    const double ring = 2.0 * (t - 1.0) / t;
    d.allreduce_bytes = ring * Bn * (hidden_reductions * static_cast<double>(c.hidden_size) * 2 + norm_reductions * 4) +
                        Bn * static_cast<double>(c.vocab_size) * 4 * (t - 1.0) / t;
    d.node_collectives = static_cast<int64_t>(hidden_reductions + norm_reductions) + 1;
  }
  if (p.ep > 1 && p.moe_layers > 0) {
    d.a2a_nvlink_bytes = 2.0 * L_moe * Bn * d.dests_in_node * A2 * (t - 1.0) / t / t;
    if (m.nodes > 1) {
      const double send = Bn * d.dests_off_node * A2 / t, receive = (B - Bn) * d.dests_in_node * A2 / t;
      d.network_bytes = 2.0 * L_moe * std::max(send, receive);
    }
    d.collectives = 2 * p.moe_layers;
  }

  // Host: streamed experts cross PCIe (and are read from host DRAM); CPU experts take the latent
  // rows down and their outputs back.
  if (streams) {
    d.pcie_bytes = offloaded * touched * expert;
    d.host_read_bytes = node_offloaded * touched * expert;
  }
  if (cpu) {
    d.cpu_bytes = node_offloaded * touched * expert;
    d.pcie_bytes = 2.0 * B * k * offloaded / E * L_moe * A2;
  }
  if (streams || cpu) d.host_round_trips = p.moe_layers;

  const DeviceKind& dev = *m.device;
  d.memory_s = d.hbm_bytes() / dev.hbm_read_bps;
  d.compute_s = d.flops / dev.bf16_flops;
  d.nvlink_s = (d.allreduce_bytes + d.a2a_nvlink_bytes) / dev.nvlink_bps;
  d.network_s = d.network_bytes / m.network_bps;
  d.pcie_s = std::max(d.pcie_bytes / dev.pcie_bps, d.host_read_bytes / m.cpu_bps);
  d.cpu_s = d.cpu_bytes / m.cpu_bps;
  d.latency_s = static_cast<double>(d.node_collectives) * kIntraNodeCollectiveSeconds +
                static_cast<double>(d.collectives) * (m.nodes > 1 ? kInterNodeCollectiveSeconds : kIntraNodeCollectiveSeconds) +
                static_cast<double>(d.host_round_trips) * kHostRoundTripSeconds;
  return d;
}

}  // namespace k3
