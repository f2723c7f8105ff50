// The model's weights bound from the LoadPlan for the CPU backend: every Linear / expert is a
// cpu::CpuLinear handle (its kernel chosen by scheme at load), every vector a float32 array after
// the binding's transforms (A_log narrowed to num_heads, GGUF forms undone). Derived values are
// precomputed here: the AttnRes score vector c = norm ⊙ proj (spec §3.1) and the per-head MLA
// absorbed matrices (spec §5).
#pragma once

#include <memory>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "model/config.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3 {

using Linear = std::unique_ptr<cpu::CpuLinear>;
using Floats = std::vector<float>;

struct KdaWeights {
  Linear q, k, v, o;
  Linear g;           // full-rank output gate (K3), or null
  Linear g_a, g_b;    // low-rank output gate (Kimi-Linear), or null
  Linear f_a, f_b;    // low-rank forget-gate logits
  Linear b;           // β logits, one per head
  Floats q_conv, k_conv, v_conv;  // [P][W]
  Floats a_log;       // [H]
  Floats dt_bias;     // [P]
  Floats o_norm;      // [D]
};

struct MlaWeights {
  Linear q_a, q_b;    // q-LoRA, or null
  Floats q_a_norm;
  Linear q;           // direct q (no q-LoRA), or null
  Linear kv_a;        // → [c | k_pe]
  Floats kv_a_norm;
  Linear kv_b;        // c → per head [k_nope | v] (prefill)
  // kv_b dequantised per head for the absorbed decode: w_uk [n_h][d_nope][r_kv], w_uv [n_h][d_v][r_kv].
  Floats w_uk, w_uv;
  Linear g;           // output gate, or null
  Linear o;
};

struct MlpWeights {
  Linear gate, up, down;
};

struct MoeWeights {
  Linear router;                 // [E, hidden]
  Floats correction_bias;        // [E]; zeros when the config has none
  Linear latent_down, latent_up; // null without latent MoE
  Floats latent_norm;            // empty without the latent norm
  std::vector<Linear> w1, w3, w2;  // per expert: gate, up, down
  MlpWeights shared;             // null members without shared experts
};

struct LayerWeights {
  Floats input_norm, post_attention_norm;
  Floats attn_res_c, mlp_res_c;            // AttnRes score vectors (norm ⊙ proj); empty without AttnRes
  KdaWeights kda;                          // KDA layers
  MlaWeights mla;                          // MLA layers
  MlpWeights mlp;                          // dense FFN layers
  MoeWeights moe;                          // MoE layers
};

struct ModelWeights {
  Floats embed;         // [vocab][hidden]
  std::vector<LayerWeights> layers;
  Floats final_norm;
  Floats output_res_c;  // empty without AttnRes
  Linear lm_head;       // lm_head, or the embedding when tied
};

// kv_b [n_h·(d_nope + d_v), r_kv] split per head into the absorbed-form matrices (spec §5):
// w_uk [n_h][d_nope][r_kv] (each head's first d_nope rows) and w_uv [n_h][d_v][r_kv] (the rest).
void split_kv_b(const std::vector<float>& kv_b, const MlaConfig& m, std::vector<float>& w_uk, std::vector<float>& w_uv);

// Binds every parameter of a plan without problems. `files` must outlive the weights (kernels may
// keep views into mapped checkpoint bytes).
ModelWeights bind_weights(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                          const cpu::LinearOptions& options = {});

}  // namespace k3
