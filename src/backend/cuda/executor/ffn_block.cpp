// Feed-forward blocks on the GPU (spec §7, §8), the CUDA forms of cpu::mlp and cpu::moe: the dense
// gated MLP, and the MoE layer — fp32 router logits, the one-kernel router, optional latent
// down-projection, expert dispatch and two grouped GEMMs around the gated activation (GEMM 2 applies
// the routing weights in its epilogue), the combine (a sum in pick order), latent norm and
// up-projection, shared experts on the full-width input.
// Experts are bf16 or kept packed (device_weights.h: NVFP4 / MXFP4, W4A8, GGUF): either way GEMM1
// returns dequantised values — the packed kernels apply every weight scale (NVFP4's per-expert global
// scale for gate and up separately) in their epilogue — so the activation's gate/up alphas are 1 and
// no scale is applied twice. With CudaOptions::fused_moe_activation, where a 4-bit bank runs the
// warpgroup-MMA prefill kernel, GEMM1 and the activation are one kernel (the gate and up values stay
// fp32 into the activation). Where GEMM 2's bank quantises its input (W4A8, GGUF decode, W4A4), the
// activation is applied by the kernel that quantises it (one pass; ExpertInput).
#include "backend/cuda/executor/expert_stream.h"
#include "backend/cuda/executor/rows.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"
#include "backend/cuda/moe/moe_w4.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {
namespace {

// Where an expert GEMM's input comes from: sorted rows (GEMM 1's gathered rows; GEMM 2's after the
// fused GEMM 1 + activation kernel), or GEMM 1's gate and up halves under the gated activation, which
// is then applied by the kernel that forms the bank's input — for a quantised activation contract the
// activation and GEMM 2's input quantisation are one pass (moe_quantize_*_activation: bit for bit the
// two kernels they replace).
struct ExpertInput {
  DeviceTensor rows;  // the rows; with act: where their bf16 form goes if the bank multiplies bf16 rows
  const GatedActivation* act = nullptr;
  DeviceTensor gate, up;

  static ExpertInput of_rows(const DeviceTensor& rows) { return {rows, nullptr, {}, {}}; }
  static ExpertInput activated(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                               const DeviceTensor& bf16_rows) {
    return {bf16_rows, &act, gate, up};
  }
};

// The input as bf16 rows (what the bf16, W4A16 and GGUF prefill kernels multiply).
DeviceTensor bf16_rows(StepContext& ctx, const ExpertInput& in) {
  if (in.act != nullptr) gated_activation(*in.act, in.gate, in.up, in.rows, ctx.stream);
  return in.rows;
}

// A 4-bit bank's GEMM input: bf16 rows, or under W4A4 (CudaOptions::w4a4) the checkpoint's NVFP4
// activation values of them in step scratch.
DeviceTensor w4_input(StepContext& ctx, const ExpertInput& in, const DeviceExperts& w, const MoeDispatch& d) {
  if (w.input_scale == nullptr) return bf16_rows(ctx, in);
  const DeviceTensor out = ctx.scratch(DType::kBF16, in.rows.rows, in.rows.cols, "moe nvfp4 activations");
  if (in.act != nullptr) {
    moe_quantize_nvfp4_activation(*in.act, in.gate, in.up, w.input_scale, d, out, ctx.stream);
  } else {
    moe_quantize_nvfp4_rows(in.rows, w.input_scale, d, out, ctx.stream);
  }
  return out;
}

// ys = in · W_eᵀ per sorted row in the bank's own kernel; W4A8 and GGUF's decode GEMV first quantise
// the input under the checkpoint's activation contract (int8 per row / 8-bit blocks; GGUF prefill
// multiplies bf16 rows: moe_ggml_tile_for), and NVFP4 under W4A4 (CudaOptions::w4a4) to its FP4
// values, into step scratch.
// `model_experts`: the E the kernel is chosen for — the model's, also when the dispatch runs over
// streaming's slot bank, so a streamed layer runs the same kernels as a resident one.
void expert_gemm(StepContext& ctx, const ExpertInput& in, const DeviceExperts& w, const MoeDispatch& d,
                 const DeviceTensor& ys, int64_t model_experts) {
  const int64_t R = d.rows(), K = in.rows.cols;
  switch (w.kind) {
    case DeviceExperts::Kind::kBf16:
      moe_grouped_gemm_bf16(bf16_rows(ctx, in), w.bf16, d, ys, ctx.stream, moe_tile_for(R, model_experts));
      break;
    case DeviceExperts::Kind::kW4:
      moe_grouped_gemm_w4(w4_input(ctx, in, w, d), w.w4, d, ys, ctx.stream, moe_w4_tile_for(R, model_experts));
      break;
    case DeviceExperts::Kind::kW4A8: {
      const Int8Rows q{ctx.scratch(DType::kU8, R, K, "moe int8 rows"),
                       ctx.arena.alloc_n<float>(static_cast<size_t>(R), "moe int8 row scales")};
      if (in.act != nullptr) {
        moe_quantize_int8_activation(*in.act, in.gate, in.up, q, ctx.stream);
      } else {
        moe_quantize_int8_rows(in.rows, q, ctx.stream);
      }
      moe_grouped_gemm_w4a8(q, w.w4a8, d, ys, ctx.stream, moe_w4a8_tile_for(R, model_experts, w.w4a8.groups() > 1));
      break;
    }
    case DeviceExperts::Kind::kGgml: {
      const MoeTile tile = moe_ggml_tile_for(w.ggml.type, R, model_experts, w.ggml.n);
      if (tile != MoeTile::kM16) {
        moe_grouped_gemm_ggml(bf16_rows(ctx, in), w.ggml, d, ys, ctx.stream, tile);
        ++ctx.ggml_prefill_gemms;
        break;
      }
      const MoeGgmlActs acts = moe_ggml_acts_view(ctx.arena.alloc(moe_ggml_acts_bytes(w.ggml.type, R, K), "moe ggml activations"),
                                                  w.ggml.type, R, K);
      if (in.act != nullptr) {
        moe_ggml_quantize_activation(*in.act, in.gate, in.up, acts, ctx.stream);
      } else {
        moe_ggml_quantize(in.rows, acts, ctx.stream);
      }
      moe_grouped_gemv_ggml(acts, w.ggml, d, ys, ctx.stream);
      break;
    }
  }
}

// GEMM 1 and the gated activation in one kernel where the bank's kernel for these shapes has the
// activation in its epilogue (4-bit banks on the warpgroup-MMA prefill kernel: moe_grouped_gemm_w4_gated);
// false when it has not (nothing ran).
bool fused_gemm1(StepContext& ctx, const DeviceTensor& xs, const DeviceExperts& w13, const MoeDispatch& d,
                 const GatedActivation& act, const DeviceTensor& out, int64_t model_experts) {
  if (w13.kind != DeviceExperts::Kind::kW4) return false;
  const int64_t R = d.rows();
  const W4Kernel kernel =
      moe_w4_kernel_for(moe_w4_tile_for(R, model_experts), w13.w4.format, R, model_experts, w13.w4.k);
  if (kernel != W4Kernel::kWgmma) return false;
  return moe_grouped_gemm_w4_gated(w4_input(ctx, ExpertInput::of_rows(xs), w13, d), w13.w4, d, act, out, ctx.stream, kernel);
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

void moe_block(StepContext& ctx, int64_t layer, const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out) {
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
  // The routed sum goes straight into `out`, or to the latent up-projection: f32 for its norm, else
  // bf16 as the GEMM reads it (f32 when streaming, whose passes accumulate; the GEMM input rounds the
  // same sum to bf16 once, as the combine would).
  const DType routed_dtype = w.latent_norm || ctx.experts != nullptr ? DType::kF32 : DType::kBF16;
  const DeviceTensor routed = w.latent_up ? ctx.scratch(routed_dtype, T, D, "moe routed sum") : out;

  // One pass of dispatch → gather → GEMM 1 → activation → GEMM 2 → combine over `bank` (E_bank
  // experts) for the picks `pick_ids` names (−1: skipped).
  const int64_t E_bank = ctx.experts != nullptr ? ctx.experts->slots() : E;
  const MoeDispatch d =
      moe_dispatch_view(ctx.arena.alloc(moe_dispatch_bytes(T, k, E_bank), "moe dispatch"), T, k, E_bank);
  const DeviceTensor xs = ctx.scratch(DType::kBF16, R, D, "moe sorted rows");
  const DeviceTensor gate_up = ctx.scratch(DType::kBF16, R, 2 * I, "moe gate|up");
  const DeviceTensor a = ctx.scratch(DType::kBF16, R, I, "moe activation");
  const DeviceTensor ys = ctx.scratch(DType::kF32, R, D, "moe expert outputs");
  float* row_weight = ctx.arena.alloc_n<float>(static_cast<size_t>(R), "moe row weights");
  auto pass = [&](const DeviceTensor& pick_ids, const DeviceExperts& w13, const DeviceExperts& w2, bool accumulate) {
    const size_t pass_mark = ctx.arena.mark();
    moe_dispatch(pick_ids, d, ctx.stream);
    moe_row_weights(weights, d, row_weight, ctx.stream);
    const MoeDispatch weighted = moe_weighted(d, row_weight);  // GEMM 2 applies the routing weights
    moe_gather(z, d, xs, ctx.stream);
    const GatedActivation act = gated_activation_params(ctx.config.activation);
    if (ctx.fused_moe_activation && fused_gemm1(ctx, xs, w13, d, act, a, E)) {
      ++ctx.fused_gemm1_calls;
      expert_gemm(ctx, ExpertInput::of_rows(a), w2, weighted, ys, E);
    } else {
      expert_gemm(ctx, ExpertInput::of_rows(xs), w13, d, gate_up, E);
      expert_gemm(ctx, ExpertInput::activated(act, gate_up.col_slice(0, I), gate_up.col_slice(I, I), a), w2, weighted,
                  ys, E);
    }
    moe_combine(ys, d, DeviceTensor(), routed, accumulate, ctx.stream);  // the rows carry their weights
    ctx.arena.reset(pass_mark);
  };
  if (ctx.experts == nullptr) {
    pass(ids, w.w13, w.w2, false);
  } else {
    // Expert streaming (expert_stream.h): the passes over the slot banks, each after the copies it
    // needs; every pick runs in exactly one pass.
    ExpertStream& es = *ctx.experts;
    const std::vector<DeviceTensor> tables = es.plan(layer, ids, ctx.arena, ctx.stream);
    for (size_t i = 0; i < tables.size(); ++i) {
      es.before_pass(i, ctx.stream);
      pass(tables[i], es.slot_bank(0), es.slot_bank(1), i > 0);
      es.after_pass(i, ctx.stream);
    }
  }
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
