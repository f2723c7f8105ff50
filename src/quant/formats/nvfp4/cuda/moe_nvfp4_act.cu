// moe_quantize_nvfp4_rows and moe_quantize_nvfp4_activation (moe_nvfp4_act.h): two threads per
// 16-value block. The roundings reuse core/numeric.h's constexpr rounding (round_magnitude, ties to
// even) so the GPU and the CPU contract share one definition.
#include <string>

#include "backend/cuda/ops/activation.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/core/launch.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"
#include "core/numeric.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kBlock = 16;
constexpr int kThreads = 256;

// |v| rounded to a sign-magnitude format (mant_bits, bias), ties to even, saturated at max_code.
__device__ __forceinline__ float round_saturated(float v, int mant_bits, int bias, uint32_t max_code) {
  const uint32_t bits = __float_as_uint(v);
  uint32_t code = numeric_detail::round_magnitude(bits & 0x7FFFFFFFu, mant_bits, bias);
  if (code > max_code) code = max_code;
  const float mag = numeric_detail::decode_magnitude(code, mant_bits, bias);
  return (bits >> 31) ? -mag : mag;
}
// E4M3FN with saturation at 448 (code 0x7E) and E2M1 at 6 (code 7): numeric.h's kE4M3FNSat and kE2M1.
__device__ __forceinline__ float e4m3_sat(float v) { return round_saturated(v, 3, 7, 0x7E); }
__device__ __forceinline__ float e2m1_sat(float v) { return round_saturated(v, 1, 1, 0x7); }

// Two threads per 16-value block of the whole [R, K], 8 values each (the blocks are independent, so
// every load is in flight at once: a decode step quantises a few rows and is bound by latency; with
// the Activated source the activation's arithmetic is spread over twice as many threads). The pair's
// lanes (2j, 2j + 1) share the block's amax by one shuffle; lanes without a block (past the rows, or
// past the dispatch's last expert) take part with zeros. Src: the rows (kernel_util.cuh's RowsSource)
// or GEMM 1's output under the gated activation (activation.cuh's Activated). Launched as a
// programmatic dependent: nothing is read before the wait.
template <class Src>
__global__ void __launch_bounds__(kThreads) nvfp4_rows_kernel(Src src, const float* __restrict__ input_scale,
                                                              const int32_t* __restrict__ offsets, int experts,
                                                              bf16* __restrict__ out, int64_t ldo, int rows, int k) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int vecs_per_row = k / kVec;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int r = static_cast<int>(i / vecs_per_row), c = static_cast<int>(i % vecs_per_row) * kVec;
  const bool valid = i < static_cast<int64_t>(rows) * vecs_per_row && r < offsets[experts];
  float v[kVec] = {};
  float gs = 0.0f;
  if (valid) {
    int lo = 0, hi = experts;  // the expert e with offsets[e] <= r < offsets[e + 1]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (offsets[mid] <= r) lo = mid; else hi = mid;
    }
    gs = 1.0f / input_scale[lo];
    src.load8(r, c, v);
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  if (!valid) return;
  const float sf = e4m3_sat(__fmul_rn(__fdiv_rn(amax, 6.0f), gs));
#pragma unroll
  for (int j = 0; j < kVec; ++j) v[j] = sf > 0.0f ? __fmul_rn(e2m1_sat(__fdiv_rn(__fmul_rn(v[j], gs), sf)), sf) : 0.0f;
  detail::store8(out + static_cast<int64_t>(r) * ldo + c, v);
}

// The checks both entries share (xs: the rows or gate); false when there is nothing to do.
bool check(const DeviceTensor& xs, const float* input_scale, const MoeDispatch& d, const DeviceTensor& out,
           const char* what) {
  const std::string w(what);
  const int64_t R = xs.rows, K = xs.cols;
  expect_dtype(out, DType::kBF16, (w + " out").c_str());
  expect_shape(out, R, K, (w + " out").c_str());
  if (R != d.rows()) throw Error(w + ": " + std::to_string(R) + " rows for a dispatch of " + std::to_string(d.rows()));
  if (K % kBlock != 0 || !rows_aligned16(xs) || !rows_aligned16(out)) {
    throw Error(w + ": K a multiple of 16 and 16-byte aligned rows, got " + xs.describe());
  }
  if (input_scale == nullptr || d.expert_offsets == nullptr) throw Error(w + ": no input scales or dispatch");
  if ((R * (K / kVec) + kThreads - 1) / kThreads > INT32_MAX || K > INT32_MAX / 2) {
    throw Error(w + ": too many rows or columns");
  }
  return R > 0;
}

template <class Src>
void launch(const Src& src, int64_t R, int64_t K, const float* input_scale, const MoeDispatch& d,
            const DeviceTensor& out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((R * (K / kVec) + kThreads - 1) / kThreads));
  launch_dependent(nvfp4_rows_kernel<Src>, grid, dim3(kThreads), 0, stream, src, input_scale, d.expert_offsets,
                   static_cast<int>(d.experts), out.as<bf16>(), out.ld, static_cast<int>(R), static_cast<int>(K));
}

}  // namespace

void moe_quantize_nvfp4_rows(const DeviceTensor& xs, const float* input_scale, const MoeDispatch& d,
                             const DeviceTensor& out, cudaStream_t stream) {
  if (xs.dtype != DType::kBF16 && xs.dtype != DType::kF32) {
    throw Error("moe_quantize_nvfp4_rows: f32 or bf16 rows, got " + xs.describe());
  }
  if (!check(xs, input_scale, d, out, "moe_quantize_nvfp4_rows")) return;
  if (xs.dtype == DType::kBF16) {
    launch(detail::RowsSource<bf16>{xs.as<const bf16>(), xs.ld}, xs.rows, xs.cols, input_scale, d, out, stream);
  } else {
    launch(detail::RowsSource<float>{xs.as<const float>(), xs.ld}, xs.rows, xs.cols, input_scale, d, out, stream);
  }
}

void moe_quantize_nvfp4_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                   const float* input_scale, const MoeDispatch& d, const DeviceTensor& out,
                                   cudaStream_t stream) {
  check_gated_activation(act, gate, up, "moe_quantize_nvfp4_activation");
  expect_dtype(gate, DType::kBF16, "moe_quantize_nvfp4_activation gate");
  if (!check(gate, input_scale, d, out, "moe_quantize_nvfp4_activation")) return;
  act::visit_activated(act, gate, up, [&](const auto& src) {
    launch(src, gate.rows, gate.cols, input_scale, d, out, stream);
  });
}

}  // namespace k3::cuda
