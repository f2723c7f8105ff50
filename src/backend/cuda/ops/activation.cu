// Gated activation act(gate·α_g, up·α_u) (SiLU or SiTU with the optional β_lin cap on up), elementwise,
// 8 values per thread; grid x over the columns, y over the rows (no index division). The arithmetic:
// activation.cuh.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/ops/activation.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {
namespace {

using act::Act;
using act::activate;
using act::Kind;
using detail::bf16;
using detail::kVec;
constexpr int kThreads = 128;

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
  Kind kind{};
  const Act act = act::make_act(a, kind);
  switch (kind) {
    case Kind::kSilu: launch<Kind::kSilu, Tin, Tout>(act, gate, up, out, stream); break;
    case Kind::kSituCapped: launch<Kind::kSituCapped, Tin, Tout>(act, gate, up, out, stream); break;
    case Kind::kSitu: launch<Kind::kSitu, Tin, Tout>(act, gate, up, out, stream); break;
  }
}

}  // namespace

void check_gated_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                            const char* what) {
  const std::string w(what);
  expect_dtype(up, gate.dtype, (w + " up").c_str());
  expect_shape(up, gate.rows, gate.cols, (w + " up").c_str());
  if (!vec8_ok(gate) || !vec8_ok(up)) {
    throw Error(w + ": needs cols % 8 == 0 and 16-byte aligned rows, got " + gate.describe());
  }
  if (act.situ && !(act.beta > 0.0f)) throw Error(w + ": SiTU beta must be > 0");
  if (gate.cols > INT32_MAX / 2) throw Error(w + ": rows too wide");
}

void gated_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                      const DeviceTensor& out, cudaStream_t stream) {
  check_gated_activation(act, gate, up, "gated_activation");
  expect_shape(out, gate.rows, gate.cols, "gated_activation out");
  if (!vec8_ok(out)) throw Error("gated_activation: needs 16-byte aligned out rows, got " + out.describe());
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
