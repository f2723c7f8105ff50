// Feed-forward operations on the GPU (spec §7, §8) that model/blocks.h mlp_block and moe_block
// compose: the gated projection (gate and up GEMMs, the gated activation), fp32 router logits into
// the one-kernel router, and the routed experts — expert dispatch and two grouped GEMMs around the
// gated activation (GEMM 2 applies the routing weights in its epilogue), the combine (a sum in pick
// order).
// Experts are bf16 or kept packed by their format (device_weights.h, cuda_format.h): either way GEMM1
// returns dequantised values — the packed kernels apply every weight scale (per-expert global scales
// of gate and up separately) in their epilogue — so the activation's gate/up alphas are 1 and no
// scale is applied twice. Where GEMM 2's bank quantises its input (an integer or W4A4 activation
// contract), the activation is applied by the kernel that quantises it (one pass; ExpertInput).
#include "backend/cuda/executor/cpu_experts.h"
#include "backend/cuda/executor/rank_exchange.h"
#include "backend/cuda/executor/expert_subset.h"
#include "backend/cuda/executor/expert_stream.h"
#include "backend/cuda/executor/block_ops.h"
#include "backend/cuda/executor/rows.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/ops/ops.h"
#include "model/blocks.h"

namespace k3::cuda {

DeviceTensor bf16_rows(StepContext& ctx, const ExpertInput& in) {
  if (in.act != nullptr) {
    const OpScope activation = ctx.op(OpClass::kMoeAct);
    gated_activation(*in.act, in.gate, in.up, in.rows, ctx.stream);
    return in.rows;
  }
  if (in.rows.dtype == DType::kBF16) return in.rows;
  const DeviceTensor rounded = ctx.scratch(DType::kBF16, in.rows.rows, in.rows.cols, "bf16 bank rows");
  copy_rows(in.rows, nullptr, rounded, nullptr, rounded.rows, ctx.stream);
  return rounded;
}

namespace {

// ys = in · W_eᵀ per sorted row in the bank's own kernel: bf16, or the packed bank's format's
// (DeviceExpertBank::gemm, which may first quantise the input under the checkpoint's activation
// contract into step scratch). The kernels follow the dispatch's choice E (MoeDispatch::choice_experts).
void expert_gemm(StepContext& ctx, const ExpertInput& in, const DeviceExperts& w, const MoeDispatch& d,
                 const DeviceTensor& ys) {
  if (w.packed()) {
    w.packed_bank->gemm(ctx, in, d, ys);
  } else {
    moe_grouped_gemm_bf16(bf16_rows(ctx, in), w.bf16, d, ys, ctx.stream);
  }
}

}  // namespace

MlpBuffers BlockOps::mlp_buffers(const DeviceMlp& w, const DeviceTensor& x) const {
  // An MLP inside a MoE block is its shared experts (a dense layer's is marked by the step).
  if (ctx_.timeline != nullptr && ctx_.timeline->current() != OpClass::kDenseMlp) ctx_.mark(OpClass::kSharedExperts);
  ctx_.input_forms.share(x);
  return {scratch(DType::kBF16, x.rows, w.gate.n, "mlp activation")};
}

void BlockOps::gated_projection(const DeviceLinear& gate, const DeviceLinear& up, const DeviceTensor& x,
                                const DeviceTensor& a) const {
  const int64_t I = gate.n;
  const DeviceTensor gate_up = scratch(DType::kBF16, x.rows, 2 * I, "mlp gate|up");
  ctx_.linear(gate, x, gate_up.col_slice(0, I));
  ctx_.linear(up, x, gate_up.col_slice(I, I));
  gated_activation(gated_activation_params(ctx_.config.activation), gate_up.col_slice(0, I), gate_up.col_slice(I, I), a,
                   ctx_.stream);
}

MoeBuffers BlockOps::moe_buffers(const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out) const {
  const MoeConfig& mc = *ctx_.config.moe;
  const int64_t T = x.rows, E = mc.num_experts, k = mc.experts_per_token;
  ctx_.input_forms.share(x);
  MoeBuffers s;
  s.logits = scratch(DType::kF32, T, E, "router logits");
  s.routing.ids = scratch(DType::kI32, T, k, "router expert ids");
  s.routing.weights = scratch(DType::kF32, T, k, "router weights");
  if (w.latent_down) s.z = scratch(DType::kBF16, T, w.latent_down.n, "latent moe input");
  const int64_t D = w.latent_down ? w.latent_down.n : x.cols;
  // The routed sum goes straight into `out`, or to the latent up-projection: f32 for its norm, else
  // bf16 as the GEMM reads it (f32 when streaming or with CPU experts, whose parts accumulate; the
  // GEMM input rounds the same sum to bf16 once, as the combine would).
  const bool parts = ctx_.experts != nullptr || ctx_.expert_share != nullptr;
  const DType routed_dtype = w.latent_norm || parts ? DType::kF32 : DType::kBF16;
  s.routed = w.latent_up ? scratch(routed_dtype, T, D, "moe routed sum") : out;
  if (w.latent_up && w.latent_norm) s.normed = scratch(DType::kBF16, T, D, "moe latent normed");
  if (w.shared.gate) s.shared = scratch(DType::kF32, T, out.cols, "shared expert output");
  return s;
}

void BlockOps::route(const DeviceTensor& logits, DeviceVector bias, const Routing& routing) const {
  const OpScope router = ctx_.op(OpClass::kMoeRouter);
  moe_route(router_params(*ctx_.config.moe), logits, bias, routing.ids, routing.weights, ctx_.stream);
}

void BlockOps::routed_experts(int64_t layer, const DeviceMoe& w, const DeviceTensor& z, const Routing& routing,
                              const DeviceTensor& routed) const {
  StepContext& ctx = ctx_;
  const MoeConfig& mc = *ctx.config.moe;
  const int64_t T = z.rows, E = mc.num_experts, k = mc.experts_per_token, I = mc.moe_intermediate_size;
  const int64_t D = z.cols, R = T * k;
  // One pass of dispatch → gather → GEMM 1 → activation → GEMM 2 → combine over `bank` (E_bank
  // experts) for the picks `pick_ids` names (−1: skipped).
  // The kernels are chosen for the model's E also over streaming's slot bank, so a streamed layer
  // runs the kernels of a resident one.
  ctx.mark(OpClass::kMoeDispatch);
  if (ctx.timeline != nullptr) ctx.timeline->record_picks(routing.ids, ctx.stream);
  const int64_t E_bank = ctx.experts != nullptr        ? ctx.experts->slots()
                         : ctx.expert_share != nullptr ? ctx.expert_share->count(layer)
                                                       : E;
  MoeDispatch d = moe_dispatch_view(ctx.arena.alloc(moe_dispatch_bytes(T, k, E_bank), "moe dispatch"), T, k, E_bank);
  d.choice_experts = E;
  const DeviceTensor xs = scratch(DType::kBF16, R, D, "moe sorted rows");
  const DeviceTensor gate_up = scratch(DType::kBF16, R, 2 * I, "moe gate|up");
  const DeviceTensor a = scratch(DType::kBF16, R, I, "moe activation");
  const DeviceTensor ys = scratch(DType::kF32, R, D, "moe expert outputs");
  float* row_weight = ctx.arena.alloc_n<float>(static_cast<size_t>(R), "moe row weights");
  auto pass = [&](const DeviceTensor& pick_ids, const DeviceExperts& w13, const DeviceExperts& w2, bool accumulate) {
    const size_t pass_mark = ctx.arena.mark();
    ctx.mark(OpClass::kMoeDispatch);
    moe_dispatch(pick_ids, d, ctx.stream);
    moe_row_weights(routing.weights, d, row_weight, ctx.stream);
    const MoeDispatch weighted = moe_weighted(d, row_weight);  // GEMM 2 applies the routing weights
    moe_gather(z, d, xs, ctx.stream);
    const GatedActivation act = gated_activation_params(ctx.config.activation);
    ctx.mark(OpClass::kMoeGemm1);
    expert_gemm(ctx, ExpertInput::of_rows(xs), w13, d, gate_up);
    ctx.mark(OpClass::kMoeGemm2);
    expert_gemm(ctx, ExpertInput::activated(act, gate_up.col_slice(0, I), gate_up.col_slice(I, I), a), w2, weighted,
                ys);
    ctx.mark(OpClass::kMoeCombine);
    moe_combine(ys, d, DeviceTensor(), routed, accumulate, ctx.stream);  // the rows carry their weights
    ctx.arena.reset(pass_mark);
  };
  if (ctx.expert_share != nullptr) {
    // Only the experts this GPU holds (expert_subset.h); complete_routed adds the others' picks.
    if (ctx.cpu_experts != nullptr) ctx.cpu_experts->begin(layer, z, routing.ids, routing.weights, ctx.stream);
    pass(ctx.expert_share->picks(layer, routing.ids, ctx.arena, ctx.stream), w.experts.w13, w.experts.w2, false);
  } else if (ctx.experts == nullptr) {
    pass(routing.ids, w.experts.w13, w.experts.w2, false);
  } else {
    // Expert streaming (expert_stream.h): the passes over the slot banks, each after the copies it
    // needs; every pick runs in exactly one pass.
    ExpertStream& es = *ctx.experts;
    const std::vector<DeviceTensor> tables = es.plan(layer, routing.ids, ctx.arena, ctx.stream);
    for (size_t i = 0; i < tables.size(); ++i) {
      es.before_pass(i, ctx.stream);
      pass(tables[i], es.slot_bank(0), es.slot_bank(1), i > 0);
      es.after_pass(i, ctx.stream);
    }
  }
}

void BlockOps::complete_routed(const DeviceTensor& routed) const {
  if (ctx_.cpu_experts != nullptr) {
    ctx_.mark(OpClass::kCpuExperts);
    ctx_.cpu_experts->finish(routed, ctx_.arena, ctx_.stream);
  }
  if (ctx_.expert_ranks != nullptr) {
    ctx_.mark(OpClass::kCommunication);
    ctx_.expert_ranks->all_reduce(routed, ctx_.arena, ctx_.stream);
  }
  ctx_.mark(OpClass::kMoeLinears);  // the latent up-projection and the shared experts' add
}

void mlp_block(StepContext& ctx, const DeviceMlp& w, const DeviceTensor& x, const DeviceTensor& out) {
  BlockOps ops(ctx);
  k3::mlp_block(ops, w, x, out);
}

void moe_block(StepContext& ctx, int64_t layer, const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out) {
  BlockOps ops(ctx);
  k3::moe_block(ops, ctx.config.rms_norm_eps, layer, w, x, out);
}

}  // namespace k3::cuda
