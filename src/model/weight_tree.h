// The model's weights after loading, declared once for every backend: every parameter of a KDA
// layer (spec §6), an MLA layer (§5), a dense MLP (§8), a (latent) MoE (§7), each layer's norms and
// AttnRes score vectors (§3.1) and the model's embedding, final norm, output score vector and
// lm_head. model/blocks.h and model/block_order.h read this shape; each backend binds it once at load
// (backend/cpu/weights.h: bind_weights; backend/cuda/executor/device_weights.h: build_weights).
//
// The tree is templated on a backend's handle traits `H`, which say what each kind of member is in
// that backend; the backend owns the storage behind the handles:
//   H::Linear       a linear y = x·Wᵀ, W [n, k]; converts to bool, false where the projection is absent
//   H::Vector       a float32 vector (norm weights, A_log, dt_bias, correction bias, score vectors);
//                   the backend's Ops::present() says whether an optional one is there
//   H::Embedding    the embedding table [vocab, hidden]
//   H::KdaConv      a KDA layer's q, k and v short-conv weights, each [P][W]
//   H::MlaAbsorbed  kv_b in the absorbed-decode form (§5): per-head W_UK [n_h][d_nope][r_kv] and
//                   W_UV [n_h][d_v][r_kv], or, where a backend keeps it so, kv_b in its stored packed form
//   H::Experts      a MoE layer's routed experts w1 (gate), w3 (up), w2 (down) over all experts
//   H::ModelExtras  backend-only bookkeeping of the whole tree (an empty struct where there is none)
//
// What a linear handle promises: it computes under the scale contract of the scheme it was bound
// from, and it says where its bytes live — on the CPU a view into the mapped checkpoint or a host
// copy it owns (cpu::CpuLinear::scheme / bytes_location), on CUDA the device arena, in the GEMM form
// its scheme allows (cuda::DeviceLinear::kind). A handle stays valid while its backend's storage does
// (the checkpoint mapping, the device arena).
//
// A layer holds the members of both token mixers and both FFNs; those its config does not use stay
// default-constructed (absent): `mla` of a KDA layer, `moe` of a dense layer, and so on.
#pragma once

#include <vector>

namespace k3 {

template <class H>
struct KdaTree {
  typename H::Linear q{}, k{}, v{}, o{};
  typename H::Linear g{};          // full-rank output gate (K3), or absent
  typename H::Linear g_a{}, g_b{};  // low-rank output gate (Kimi-Linear), or absent
  typename H::Linear f_a{}, f_b{};  // low-rank forget-gate logits
  typename H::Linear b{};          // β logits, one per head
  typename H::KdaConv conv{};      // q, k, v short-conv weights
  typename H::Vector a_log{};      // [H]
  typename H::Vector dt_bias{};    // [P]
  typename H::Vector o_norm{};     // [D]
};

template <class H>
struct MlaTree {
  typename H::Linear q_a{}, q_b{};  // q-LoRA, or absent
  typename H::Vector q_a_norm{};
  typename H::Linear q{};           // direct q (no q-LoRA), or absent
  typename H::Linear kv_a{};        // → [c | k_pe]
  typename H::Vector kv_a_norm{};
  typename H::Linear kv_b{};        // c → per head [k_nope | v] (the expanded prefill)
  typename H::MlaAbsorbed absorbed{};  // kv_b for the absorbed decode
  typename H::Linear g{};           // output gate, or absent
  typename H::Linear o{};
};

template <class H>
struct MlpTree {
  typename H::Linear gate{}, up{}, down{};
};

template <class H>
struct MoeTree {
  typename H::Linear router{};                    // [E, hidden]
  typename H::Vector correction_bias{};           // [E]; zeros when the config has none
  typename H::Linear latent_down{}, latent_up{};  // absent without latent MoE
  typename H::Vector latent_norm{};               // absent without the latent norm
  typename H::Experts experts{};                  // routed experts
  MlpTree<H> shared{};                            // absent members without shared experts
};

template <class H>
struct LayerTree {
  typename H::Vector input_norm{}, post_attention_norm{};
  typename H::Vector attn_res_c{}, mlp_res_c{};  // AttnRes score vectors (norm ⊙ proj); absent without AttnRes
  KdaTree<H> kda{};                              // KDA layers
  MlaTree<H> mla{};                              // MLA layers
  MlpTree<H> mlp{};                              // dense FFN layers
  MoeTree<H> moe{};                              // MoE layers
};

template <class H>
struct WeightTree {
  typename H::Embedding embed{};  // [vocab][hidden]
  std::vector<LayerTree<H>> layers;
  typename H::Vector final_norm{};
  typename H::Vector output_res_c{};  // absent without AttnRes
  typename H::Linear lm_head{};       // lm_head, or the embedding when tied
  [[no_unique_address]] typename H::ModelExtras backend_extras{};
};

}  // namespace k3
