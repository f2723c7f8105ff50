// Gated activation act(gate·α_g, up·α_u) (SiLU or SiTU with the optional β_lin cap on up), elementwise,
// 8 values per thread, a grid-stride loop over the [rows, cols/8] vectors.
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;

template <typename Tin, typename Tout>
__global__ void gated_kernel(GatedActivation act, const Tin* __restrict__ gate, int64_t ldg,
                             const Tin* __restrict__ up, int64_t ldu, Tout* __restrict__ out, int64_t ldo,
                             int64_t rows, int64_t vec_per_row) {
  const int64_t total = rows * vec_per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / vec_per_row, c = (idx - r * vec_per_row) * kVec;
    float g[kVec], u[kVec], o[kVec];
    detail::load8(gate + r * ldg + c, g);
    detail::load8(up + r * ldu + c, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      g[k] *= act.gate_alpha;
      u[k] *= act.up_alpha;
      const float sig = 1.0f / (1.0f + expf(-g[k]));
      if (!act.situ) {
        o[k] = g[k] * sig * u[k];
      } else {
        const float capped = act.beta_lin > 0.0f ? act.beta_lin * tanhf(u[k] / act.beta_lin) : u[k];
        o[k] = act.beta * tanhf(g[k] / act.beta) * sig * capped;
      }
    }
    detail::store8(out + r * ldo + c, o);
  }
}

template <typename Tin, typename Tout>
void launch(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& out,
            cudaStream_t stream) {
  const int64_t vec_per_row = gate.cols / kVec, total = gate.rows * vec_per_row;
  constexpr int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 132 * 16);
  gated_kernel<Tin, Tout><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      act, gate.as<const Tin>(), gate.ld, up.as<const Tin>(), up.ld, out.as<Tout>(), out.ld, gate.rows, vec_per_row);
  K3_CUDA_CHECK_LAUNCH("gated_kernel");
}

}  // namespace

void gated_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                      const DeviceTensor& out, cudaStream_t stream) {
  expect_dtype(up, gate.dtype, "gated_activation up");
  expect_shape(up, gate.rows, gate.cols, "gated_activation up");
  expect_shape(out, gate.rows, gate.cols, "gated_activation out");
  if (!vec8_ok(gate) || !vec8_ok(up) || !vec8_ok(out)) {
    throw Error("gated_activation: needs cols % 8 == 0 and 16-byte aligned rows, got " + gate.describe());
  }
  if (act.situ && !(act.beta > 0.0f)) throw Error("gated_activation: SiTU beta must be > 0");
  if (gate.numel() == 0) return;
  const bool xf = gate.dtype == DType::kF32, yf = out.dtype == DType::kF32;
  if ((!xf && gate.dtype != DType::kBF16) || (!yf && out.dtype != DType::kBF16)) {
    throw Error("gated_activation: f32 or bf16 only, got " + gate.describe() + " -> " + out.describe());
  }
  if (xf && yf) launch<float, float>(act, gate, up, out, stream);
  if (xf && !yf) launch<float, bf16>(act, gate, up, out, stream);
  if (!xf && yf) launch<bf16, float>(act, gate, up, out, stream);
  if (!xf && !yf) launch<bf16, bf16>(act, gate, up, out, stream);
}

}  // namespace k3::cuda
