// Gated activation act(gate·α_g, up·α_u) (SiLU or SiTU with the optional β_lin cap on up), elementwise,
// 8 values per thread; grid x over the columns, y over the rows (no index division).
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
// tolerance. Errors against float64: tests/cuda/test_activation.cpp.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/ops.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kThreads = 128;

enum class Kind { kSilu, kSitu, kSituCapped };

// The launch's constants: divisions by β and β_lin become multiplications (≤ 1 ulp from the CPU's g/β).
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

template <Kind kKind, typename Tin, typename Tout>
__global__ void __launch_bounds__(kThreads) gated_kernel(Act act, const Tin* __restrict__ gate, int64_t ldg,
                                                         const Tin* __restrict__ up, int64_t ldu,
                                                         Tout* __restrict__ out, int64_t ldo, int64_t rows, int cols) {
  // A GEMM launched next as a programmatic dependent (launch.h) may start streaming its weights now;
  // it waits for this grid's completion before it reads out. This kernel is itself launched as a
  // dependent (of the decode GEMM 1, which lets it start at once): gate and up are read only after
  // that GEMM has completed.
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int c = (blockIdx.x * kThreads + threadIdx.x) * kVec;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float g[kVec], u[kVec], o[kVec];
    detail::load8(gate + r * ldg + c, g);
    detail::load8(up + r * ldu + c, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] = activate<kKind>(act, g[k], u[k]);
    detail::store8(out + r * ldo + c, o);
  }
}

template <Kind kKind, typename Tin, typename Tout>
void launch(const Act& act, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& out,
            cudaStream_t stream) {
  const int cols = static_cast<int>(gate.cols);
  const int vec_per_row = cols / kVec;
  const dim3 grid(static_cast<unsigned>((vec_per_row + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(gate.rows, 65535)));
  launch_dependent(gated_kernel<kKind, Tin, Tout>, grid, dim3(kThreads), 0, stream, act, gate.as<const Tin>(), gate.ld,
                   up.as<const Tin>(), up.ld, out.as<Tout>(), out.ld, gate.rows, cols);
}

template <typename Tin, typename Tout>
void launch(const GatedActivation& a, const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& out,
            cudaStream_t stream) {
  const bool capped = a.situ && a.beta_lin > 0.0f;
  const Act act{a.gate_alpha, a.up_alpha, 1.0f / a.beta, capped ? 1.0f / a.beta_lin : 0.0f,
                capped ? a.beta * a.beta_lin : a.beta};
  if (!a.situ) {
    launch<Kind::kSilu, Tin, Tout>(act, gate, up, out, stream);
  } else if (capped) {
    launch<Kind::kSituCapped, Tin, Tout>(act, gate, up, out, stream);
  } else {
    launch<Kind::kSitu, Tin, Tout>(act, gate, up, out, stream);
  }
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
  if (gate.cols > INT32_MAX / 2) throw Error("gated_activation: rows too wide");
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
