// Kernel parameter structs from the validated model config (kept out of the .cu files so nvcc does
// not parse the config headers).
#include "backend/cuda/ops/ops.h"
#include "model/config.h"

namespace k3::cuda {

GatedActivation gated_activation_params(const ActivationConfig& a) {
  GatedActivation g;
  g.situ = a.kind == Activation::kSitu;
  g.beta = static_cast<float>(a.situ_beta);
  g.beta_lin = g.situ && a.situ_linear_beta.has_value() ? static_cast<float>(*a.situ_linear_beta) : 0.0f;
  return g;
}

RouterParams router_params(const MoeConfig& m) {
  RouterParams p;
  p.experts = m.num_experts;
  p.top_k = m.experts_per_token;
  p.groups = m.use_grouped_topk ? m.num_expert_group : 1;
  p.topk_group = m.use_grouped_topk ? m.topk_group : 1;
  p.sigmoid = m.scoring == RouterScoring::kSigmoid;
  p.renormalize = m.renormalize;
  p.scaling = static_cast<float>(m.routed_scaling_factor);
  return p;
}

}  // namespace k3::cuda
