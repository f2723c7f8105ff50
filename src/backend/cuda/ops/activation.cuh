// The gated activation's arithmetic act(gate·α_g, up·α_u) (ops.h), shared by the elementwise kernel
// (activation.cu) and GEMM epilogues that apply it to their accumulators (moe_w4_wgmma.cuh).
//
// SiTU is written to cost about what its memory traffic does (~45 instructions and 4 MUFU operations
// per element instead of two tanhf, an expf and an IEEE division):
//   tanh(y) = N/(1 + e) with e = exp(−2y) (y clamped at −9, where tanh is −1 to fp32) and N = 1 − e,
//     or, for |y| < 0.55 where 1 − e cancels, N = (1 + e)·tanh(y) from an odd minimax polynomial
//     (≤ 1.2 ulp in fp32);
//   sigmoid(g) = 1/(1 + exp(−g));
// so the three factors share one reciprocal. exp is ex2.approx and the reciprocal rcp.approx (≤ 2 ulp
// each); every error term is relative except exp's argument rounding (≈ |x|·2^-24 relative for
// exp(x)), which matters only through sigmoid at large negative g, where the output is ~e^g small.
// A denominator that overflows (g < −52) gives 0, as the true value ~e^g·β·β_lin is to fp32's
// tolerance. Errors against float64: tests/backend/cuda/test_activation.cpp. Only included from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda::act {

enum class Kind { kSilu, kSitu, kSituCapped };

// A launch's constants: divisions by β and β_lin become multiplications (≤ 1 ulp from the CPU's g/β).
struct Act {
  float gate_alpha, up_alpha, inv_beta, inv_beta_lin;
  float scale;  // β·β_lin (capped), β (uncapped)
};

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(y) = num/den, den = 1 + exp(−2y) ∈ [1, 1 + e^18].
struct Ratio {
  float num, den;
};
__device__ __forceinline__ Ratio tanh_ratio(float y) {
  y = fmaxf(y, -9.0f);
  const float e = ex2_approx(y * -2.88539008177792681f);  // exp(−2y); 0 (flushed) for large y
  const float s = y * y;
  float p = fmaf(s, -6.274240091e-03f, 2.107167989e-02f);
  p = fmaf(p, s, -5.385230854e-02f);
  p = fmaf(p, s, 1.333258599e-01f);
  p = fmaf(p, s, -3.333331645e-01f);
  const float small = fmaf(y * s, p, y);  // tanh(y) for |y| < 0.55
  const float den = 1.0f + e;
  return {fabsf(y) < 0.55f ? small * den : 1.0f - e, den};
}

template <Kind kKind>
__device__ __forceinline__ float activate(const Act& act, float gate, float up) {
  const float g = gate * act.gate_alpha, u = up * act.up_alpha;
  if constexpr (kKind == Kind::kSilu) {
    return g * (1.0f / (1.0f + expf(-g))) * u;
  } else {
    const Ratio t = tanh_ratio(g * act.inv_beta);
    const float den = t.den * (1.0f + ex2_approx(g * -1.44269504088896341f));  // · (1 + exp(−g))
    if constexpr (kKind == Kind::kSituCapped) {
      const Ratio c = tanh_ratio(u * act.inv_beta_lin);
      return t.num * c.num * act.scale * rcp_approx(den * c.den);
    } else {
      return t.num * (u * act.scale) * rcp_approx(den);
    }
  }
}

// The constants and the form of `a` (the checks are the callers').
inline Act make_act(const GatedActivation& a, Kind& kind) {
  const bool capped = a.situ && a.beta_lin > 0.0f;
  kind = !a.situ ? Kind::kSilu : capped ? Kind::kSituCapped : Kind::kSitu;
  return {a.gate_alpha, a.up_alpha, 1.0f / a.beta, capped ? 1.0f / a.beta_lin : 0.0f, capped ? a.beta * a.beta_lin : a.beta};
}

// GEMM 1's bf16 gate and up halves as a row source (kernel_util.cuh's RowsSource): act(gate, up)
// rounded to bf16 — the values gated_activation stores into a bf16 output — so a kernel that quantises
// GEMM 2's input from this source writes what it would write after the activation kernel, bit for bit,
// without the bf16 round trip through memory.
template <Kind kKind>
struct Activated {
  Act act;
  const detail::bf16* gate;
  int64_t ldg;
  const detail::bf16* up;
  int64_t ldu;
  __device__ __forceinline__ void load8(int64_t row, int col, float (&v)[detail::kVec]) const {
    float g[detail::kVec], u[detail::kVec];
    detail::load8(gate + row * ldg + col, g);
    detail::load8(up + row * ldu + col, u);
#pragma unroll
    for (int i = 0; i < detail::kVec; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(activate<kKind>(act, g[i], u[i])));
  }
};

// Calls f(Activated<kind>{…}) for the activation `a` over gate and up (bf16, checked by the caller
// with check_gated_activation).
template <class F>
void visit_activated(const GatedActivation& a, const DeviceTensor& gate, const DeviceTensor& up, F&& f) {
  Kind kind{};
  const Act act = make_act(a, kind);
  const auto call = [&](auto k) {
    f(Activated<decltype(k)::value>{act, gate.as<const detail::bf16>(), gate.ld, up.as<const detail::bf16>(), up.ld});
  };
  switch (kind) {
    case Kind::kSilu: call(std::integral_constant<Kind, Kind::kSilu>{}); break;
    case Kind::kSitu: call(std::integral_constant<Kind, Kind::kSitu>{}); break;
    case Kind::kSituCapped: call(std::integral_constant<Kind, Kind::kSituCapped>{}); break;
  }
}

}  // namespace k3::cuda::act
