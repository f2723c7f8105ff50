// The pointwise ops on the CUDA target: backend/cuda/ops/ops.h's rms_norm, attn_res_mix_norm (the
// model's default algorithm), gated_activation and moe_route (kAuto: the kernel the model runs), on
// f32 rows.
#include <span>

#include "backend/cuda/ops/ops.h"
#include "cuda_target.h"

namespace k3::op_parity {

using cuda::DType;

std::vector<float> CudaTarget::rms_norm(const std::vector<float>& x, int64_t rows, int64_t cols,
                                        const std::vector<float>& w, double eps) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  const cuda::DeviceTensor xd = upload(x, rows, cols, DType::kF32, "rms_norm x");
  const cuda::DeviceTensor y = d.arena.alloc_tensor(DType::kF32, rows, cols, "rms_norm y");
  cuda::rms_norm(xd, upload_vector(w, "rms_norm w"), static_cast<float>(eps), y, d.stream);
  return download(y);
}

std::vector<float> CudaTarget::attn_res_mix_norm(const std::vector<std::vector<float>>& candidates, int64_t rows,
                                                 int64_t cols, const std::vector<float>& score,
                                                 const std::vector<float>& w, double eps) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  std::vector<cuda::DeviceTensor> cand;
  for (const std::vector<float>& c : candidates) cand.push_back(upload(c, rows, cols, DType::kF32, "attn_res candidate"));
  const cuda::DeviceTensor y = d.arena.alloc_tensor(DType::kF32, rows, cols, "attn_res y");
  cuda::attn_res_mix_norm(std::span<const cuda::DeviceTensor>(cand), upload_vector(score, "attn_res score"),
                          upload_vector(w, "attn_res norm"), static_cast<float>(eps), y, d.stream);
  return download(y);
}

std::vector<float> CudaTarget::gated_activation(const ActivationConfig& act, const std::vector<float>& gate,
                                                const std::vector<float>& up, int64_t rows, int64_t cols,
                                                float gate_alpha, float up_alpha) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  cuda::GatedActivation p = cuda::gated_activation_params(act);
  p.gate_alpha = gate_alpha;
  p.up_alpha = up_alpha;
  const cuda::DeviceTensor g = upload(gate, rows, cols, DType::kF32, "gate");
  const cuda::DeviceTensor u = upload(up, rows, cols, DType::kF32, "up");
  const cuda::DeviceTensor y = d.arena.alloc_tensor(DType::kF32, rows, cols, "act(gate, up)");
  cuda::gated_activation(p, g, u, y, d.stream);
  return download(y);
}

std::vector<float> CudaTarget::route(const MoeConfig& m, const std::vector<float>& logits, int64_t rows,
                                     const std::vector<float>& bias) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  const int64_t E = m.num_experts, k = m.experts_per_token;
  const cuda::DeviceTensor ld = upload(logits, rows, E, DType::kF32, "router logits");
  const cuda::DeviceTensor ids = d.arena.alloc_tensor(DType::kI32, rows, k, "router ids");
  const cuda::DeviceTensor weights = d.arena.alloc_tensor(DType::kF32, rows, k, "router weights");
  cuda::moe_route(cuda::router_params(m), ld, upload_vector(bias, "router bias"), ids, weights, d.stream);
  d.stream.sync();
  const std::vector<int32_t> id = cuda::download_i32(ids);
  const std::vector<float> w = cuda::download_f32(weights);
  std::vector<float> out;
  for (size_t i = 0; i < id.size(); ++i) {
    out.push_back(static_cast<float>(id[i]));
    out.push_back(w[i]);
  }
  return out;
}

}  // namespace k3::op_parity
