// The op classes a CUDA forward step's time is broken down into (`k3 bench --synthetic`'s per-op
// table, CudaExecutorStats::op_seconds). Each class owns the stream time from the point the executor
// marks it until the next mark (op_timeline.h), so the classes partition the step:
//   embedding    the embedding rows looked up
//   norms        the RMSNorms before the mixer and the FFN, attention-residual mixes, the final norm
//   kda, mla     the whole mixer block: projections, short conv / cache append, the attention
//                kernels, the gated norm or output gate, o_proj (the heads' all-gather excluded)
//   dense mlp    the dense layers' gated MLP
//   moe router   the routing kernel (scores, correction bias, grouped top-k, weights)
//   moe linears  the router GEMM, the latent down/up projections and their norm, the shared sum's add
//   moe dispatch dispatch, row weights and the gather of the sorted rows (and the expert map of a
//                GPU holding some experts; the streamed passes' waits)
//   moe gemm1    the experts' first grouped GEMM (w1 | w3)
//   moe act      the gated activation where it runs alone (bf16 banks); a bank that quantises its
//                input fuses it into GEMM 2's input, counted there
//   moe gemm2    the experts' second grouped GEMM (w2, routing weights in the epilogue)
//   moe combine  the sum of each token's picks
//   shared       the shared experts
//   cpu experts  the wait for, and the upload of, the CPU's picks (hybrid experts)
//   comm         the ranks' exchanges: the routed sum's all-reduce, the heads' all-gather
//   lm head      the logit rows' gather and the lm_head GEMM
#pragma once

#include <array>

namespace k3::cuda {

enum class OpClass : int {
  kEmbedding,
  kNorms,
  kKda,
  kMla,
  kDenseMlp,
  kMoeRouter,
  kMoeLinears,
  kMoeDispatch,
  kMoeGemm1,
  kMoeAct,
  kMoeGemm2,
  kMoeCombine,
  kSharedExperts,
  kCpuExperts,
  kCommunication,
  kLmHead,
  kCount
};
inline constexpr int kOpClasses = static_cast<int>(OpClass::kCount);

inline const char* op_class_name(OpClass c) {
  static constexpr std::array<const char*, kOpClasses> names = {
      "embedding", "norms",      "kda",         "mla",  "dense mlp", "moe router", "moe linears", "moe dispatch",
      "moe gemm1", "moe act",    "moe gemm2",   "moe combine", "shared experts", "cpu experts", "comm", "lm head"};
  return names[static_cast<size_t>(c)];
}

using OpSeconds = std::array<double, kOpClasses>;

}  // namespace k3::cuda
