// The parameter inventory: every parameter a K3Config implies, with its logical name, shape and
// role — independent of any checkpoint file. Families bind checkpoint tensors to these names.
//
// Logical names follow the Hugging Face text-model spelling without the multimodal
// "language_model." prefix (model.layers.{i}.self_attn.q_proj.weight, …). Routed experts are one
// parameter per layer and projection, an expert bank of shape [E, N, K]
// (model.layers.{i}.block_sparse_moe.experts.w1.weight), since kernels consume whole banks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace k3 {

enum class ParamKind : uint8_t {
  Linear,      // [N, K] weight of y = x·Wᵀ; may be quantized
  ExpertBank,  // [E, N, K]: one linear per routed expert
  Embedding,   // [vocab, hidden] lookup table
  Vector,      // norm weights, biases, A_log, dt_bias, AttnRes projections: always float
  Conv,        // KDA depthwise conv weight [P, 1, W]: always float
};

// Coarse family of a parameter, for the per-family table of `k3 check`.
enum class ParamGroup : uint8_t { Embedding, Head, Norm, AttnRes, Kda, Mla, DenseMlp, Router, Latent, Shared, Experts };

struct ParamSpec {
  std::string name;
  std::vector<uint64_t> shape;  // outermost first
  ParamKind kind = ParamKind::Linear;
  ParamGroup group = ParamGroup::Norm;
  int32_t layer = -1;           // -1 for model-level parameters

  uint64_t numel() const;
};

std::vector<ParamSpec> parameter_inventory(const K3Config& config);

// Prefix of layer i's parameters: "model.layers.{i}.".
std::string layer_prefix(int64_t layer);

const char* param_kind_name(ParamKind kind);
const char* param_group_name(ParamGroup group);

}  // namespace k3
