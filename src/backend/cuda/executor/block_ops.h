// The CUDA backend's Ops for the blocks of model/blocks.h (internal to backend/cuda/executor/): bf16
// activations between the GEMMs and fp32 where the kernels keep it (gate logits, delta-rule inputs,
// router logits, expert outputs), scratch from the step's arena given back when a block's scope
// ends, each sequence's state in the step's slots. The block-specific operations live in
// kda_block.cpp, mla_block.cpp and ffn_block.cpp. Host-only header.
#pragma once

#include <cstdint>

#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/executor/rows.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {

struct KdaBuffers {
  DeviceTensor qkv_pre, q_pre, k_pre, v_pre;  // bf16 [T, 3P] and its thirds: the conv's input layout
  DeviceTensor f_low, g_low;                  // bf16 low-rank projections (g_low: Kimi-Linear only)
  DeviceTensor f, b, g;                       // f32 forget-gate, β and output-gate logits
  DeviceTensor qkv, q, k, v;                  // f32 after the conv (the delta-rule kernels' dtype)
  DeviceTensor y;                             // bf16 gated-RMSNorm output
  KdaBatch batch;
};

struct MlaBuffers {
  DeviceTensor qa, qa_normed;  // q-LoRA: f32 out, bf16 normed
  DeviceTensor q;              // bf16 [T, H·(d_nope + d_rope)]
  DeviceTensor kv;             // f32 kv_a out [T, r + d_rope]
  DeviceTensor gate;           // bf16 output-gate logits, or empty
  DeviceTensor o;              // bf16 attention output [T, H·d_v]
};

struct MlpBuffers {
  DeviceTensor a;  // bf16 act(gate, up)
};

struct Routing {
  DeviceTensor ids;      // i32 [T, k]
  DeviceTensor weights;  // f32 [T, k]
};

struct MoeBuffers {
  DeviceTensor logits;  // f32 router logits
  Routing routing;
  DeviceTensor z;       // bf16 latent down-projection
  DeviceTensor routed;  // the routed sum: `out`, or the latent up-projection's input
  DeviceTensor normed;  // bf16 latent-normed routed sum
  DeviceTensor shared;  // f32 shared experts' output
};

class BlockOps {
 public:
  explicit BlockOps(StepContext& ctx) : ctx_(ctx) {}

  // Gives the block's scratch back to the arena when it ends, with the input forms kept in it
  // (SharedInputForms: the block's *_buffers name its input x).
  class Scope {
   public:
    explicit Scope(StepContext& ctx) : ctx_(ctx), mark_(ctx.arena.mark()), forms_(ctx.input_forms.state()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() {
      ctx_.arena.reset(mark_);
      ctx_.input_forms.restore(forms_);
    }

   private:
    StepContext& ctx_;
    size_t mark_;
    SharedInputForms::State forms_;
  };
  Scope scope() const { return Scope(ctx_); }
  void linear(const DeviceLinear& w, const DeviceTensor& x, const DeviceTensor& y) const { ctx_.linear(w, x, y); }
  void norm(const DeviceTensor& x, DeviceVector w, double eps, const DeviceTensor& y) const {
    rms_norm(x, w, static_cast<float>(eps), y, ctx_.stream);
  }
  void add(const DeviceTensor& acc, const DeviceTensor& x) const { add_rows(acc, x, ctx_.stream); }
  bool present(DeviceVector v) const { return v != nullptr; }

  KdaBuffers kda_buffers(const DeviceKda& w, const DeviceTensor& x) const;
  void kda_short_conv(int64_t layer, const DeviceKda& w, KdaBuffers& s) const;
  void kda_attention(int64_t layer, const DeviceKda& w, KdaBuffers& s) const;

  MlaBuffers mla_buffers(const DeviceMla& w, const DeviceTensor& x) const;
  void mla_append_cache(int64_t layer, const DeviceMla& w, MlaBuffers& s) const;
  void mla_attention(int64_t layer, const DeviceMla& w, MlaBuffers& s) const;

  MlpBuffers mlp_buffers(const DeviceMlp& w, const DeviceTensor& x) const;
  void gated_projection(const DeviceLinear& gate, const DeviceLinear& up, const DeviceTensor& x,
                        const DeviceTensor& a) const;

  MoeBuffers moe_buffers(const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out) const;
  void route(const DeviceTensor& logits, DeviceVector bias, const Routing& routing) const;
  void routed_experts(int64_t layer, const DeviceMoe& w, const DeviceTensor& z, const Routing& routing,
                      const DeviceTensor& routed) const;
  // The parts of the routed sum this GPU's experts do not give: the CPU experts' (hybrid CPU/GPU
  // experts), computed on the host while the GPU runs what was queued since routed_experts; the
  // other expert-parallel ranks' (their partial sums added). Nothing otherwise.
  void complete_routed(const DeviceTensor& routed) const;

 private:
  DeviceTensor scratch(DType dtype, int64_t rows, int64_t cols, const char* what) const {
    return ctx_.scratch(dtype, rows, cols, what);
  }
  StepContext& ctx_;
};

}  // namespace k3::cuda
