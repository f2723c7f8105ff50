// Feed-forward blocks on the GPU (spec §7, §8), the CUDA forms of cpu::mlp and cpu::moe: the dense
// gated MLP, and the MoE layer — fp32 router logits, the one-kernel router, optional latent
// down-projection, expert dispatch and two grouped GEMMs around the gated activation, the weighted
// combine, latent norm and up-projection, shared experts on the full-width input.
// Experts are bf16 or NVFP4 / MXFP4 kept packed (device_weights.h): either way GEMM1 returns
// dequantised values — the packed kernels apply each expert's global scale (gate and up separately) in
// their epilogue — so the activation's gate/up alphas are 1 and no scale is applied twice.
#include "backend/cuda/model/rows.h"
#include "backend/cuda/model/step.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_w4.h"
#include "backend/cuda/ops.h"

namespace k3::cuda {
namespace {

void expert_gemm(const DeviceTensor& xs, const DeviceExperts& w, const MoeDispatch& d, const DeviceTensor& ys,
                 cudaStream_t stream) {
  if (w.packed()) {
    moe_grouped_gemm_w4(xs, w.w4, d, ys, stream);
  } else {
    moe_grouped_gemm_bf16(xs, w.bf16, d, ys, stream);
  }
}

}  // namespace

void mlp_block(StepContext& ctx, const DeviceMlp& w, const DeviceTensor& x, const DeviceTensor& out) {
  const int64_t T = x.rows, I = w.gate.n;
  const size_t mark = ctx.arena.mark();
  const DeviceTensor gate_up = ctx.scratch(DType::kBF16, T, 2 * I, "mlp gate|up");
  ctx.linear(w.gate, x, gate_up.col_slice(0, I));
  ctx.linear(w.up, x, gate_up.col_slice(I, I));
  const DeviceTensor a = ctx.scratch(DType::kBF16, T, I, "mlp activation");
  gated_activation(gated_activation_params(ctx.config.activation), gate_up.col_slice(0, I), gate_up.col_slice(I, I), a,
                   ctx.stream);
  ctx.linear(w.down, a, out);
  ctx.arena.reset(mark);
}

void moe_block(StepContext& ctx, const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out) {
  const MoeConfig& mc = *ctx.config.moe;
  const int64_t T = x.rows, E = mc.num_experts, k = mc.experts_per_token, I = mc.moe_intermediate_size;
  const size_t mark = ctx.arena.mark();

  const DeviceTensor logits = ctx.scratch(DType::kF32, T, E, "router logits");
  ctx.linear(w.router, x, logits);
  const DeviceTensor ids = ctx.scratch(DType::kI32, T, k, "router expert ids");
  const DeviceTensor weights = ctx.scratch(DType::kF32, T, k, "router weights");
  moe_route(router_params(mc), logits, w.correction_bias, ids, weights, ctx.stream);

  DeviceTensor z = x;
  if (w.latent_down) {
    z = ctx.scratch(DType::kBF16, T, w.latent_down.n, "latent moe input");
    ctx.linear(w.latent_down, x, z);
  }
  const int64_t D = z.cols, R = T * k;
  const MoeDispatch d = moe_dispatch_view(ctx.arena.alloc(moe_dispatch_bytes(T, k, E), "moe dispatch"), T, k, E);
  moe_dispatch(ids, d, ctx.stream);
  const DeviceTensor xs = ctx.scratch(DType::kBF16, R, D, "moe sorted rows");
  moe_gather(z, d, xs, ctx.stream);
  const DeviceTensor gate_up = ctx.scratch(DType::kBF16, R, 2 * I, "moe gate|up");
  expert_gemm(xs, w.w13, d, gate_up, ctx.stream);
  const DeviceTensor a = ctx.scratch(DType::kBF16, R, I, "moe activation");
  gated_activation(gated_activation_params(ctx.config.activation), gate_up.col_slice(0, I), gate_up.col_slice(I, I), a,
                   ctx.stream);
  const DeviceTensor ys = ctx.scratch(DType::kF32, R, D, "moe expert outputs");
  expert_gemm(a, w.w2, d, ys, ctx.stream);

  // The routed sum goes straight into `out`, or to the latent up-projection: f32 for its norm, else
  // bf16 as the GEMM reads it.
  const DType routed_dtype = w.latent_norm ? DType::kF32 : DType::kBF16;
  const DeviceTensor routed = w.latent_up ? ctx.scratch(routed_dtype, T, D, "moe routed sum") : out;
  moe_combine(ys, d, weights, routed, false, ctx.stream);
  if (w.latent_up) {
    DeviceTensor up_in = routed;
    if (w.latent_norm) {
      up_in = ctx.scratch(DType::kBF16, T, D, "moe latent normed");
      rms_norm(routed, w.latent_norm, static_cast<float>(ctx.config.rms_norm_eps), up_in, ctx.stream);
    }
    ctx.linear(w.latent_up, up_in, out);
  }
  if (w.shared.gate) {
    const DeviceTensor shared = ctx.scratch(DType::kF32, T, out.cols, "shared expert output");
    mlp_block(ctx, w.shared, x, shared);
    add_rows(out, shared, ctx.stream);
  }
  ctx.arena.reset(mark);
}

}  // namespace k3::cuda
