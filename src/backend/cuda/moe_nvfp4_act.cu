// moe_quantize_nvfp4_rows (moe_nvfp4_act.h): one thread per 16-value block. The roundings reuse
// core/numeric.h's constexpr rounding (round_magnitude, ties to even) so the GPU and the CPU contract
// share one definition.
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_nvfp4_act.h"
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

// One thread per 16-value block of the whole [R, K] (the blocks are independent, so every load is in
// flight at once: a decode step quantises a few rows and is bound by latency).
template <typename Tin>
__global__ void __launch_bounds__(kThreads) nvfp4_rows_kernel(const Tin* __restrict__ x, int64_t ldx,
                                                              const float* __restrict__ input_scale,
                                                              const int32_t* __restrict__ offsets, int experts,
                                                              bf16* __restrict__ out, int64_t ldo, int rows, int k) {
  const int blocks_per_row = k / kBlock;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * blocks_per_row) return;
  const int r = static_cast<int>(i / blocks_per_row), b = static_cast<int>(i % blocks_per_row) * kBlock;
  if (r >= offsets[experts]) return;
  int lo = 0, hi = experts;  // the expert e with offsets[e] <= r < offsets[e + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= r) lo = mid; else hi = mid;
  }
  const float gs = 1.0f / input_scale[lo];
  float v[kBlock];
  detail::load8(x + static_cast<int64_t>(r) * ldx + b, *reinterpret_cast<float(*)[kVec]>(v));
  detail::load8(x + static_cast<int64_t>(r) * ldx + b + kVec, *reinterpret_cast<float(*)[kVec]>(v + kVec));
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) amax = fmaxf(amax, fabsf(v[j]));
  const float sf = e4m3_sat(__fmul_rn(__fdiv_rn(amax, 6.0f), gs));
#pragma unroll
  for (int j = 0; j < kBlock; ++j) v[j] = sf > 0.0f ? __fmul_rn(e2m1_sat(__fdiv_rn(__fmul_rn(v[j], gs), sf)), sf) : 0.0f;
  detail::store8(out + static_cast<int64_t>(r) * ldo + b, *reinterpret_cast<float(*)[kVec]>(v));
  detail::store8(out + static_cast<int64_t>(r) * ldo + b + kVec, *reinterpret_cast<float(*)[kVec]>(v + kVec));
}

}  // namespace

void moe_quantize_nvfp4_rows(const DeviceTensor& xs, const float* input_scale, const MoeDispatch& d,
                             const DeviceTensor& out, cudaStream_t stream) {
  const int64_t R = xs.rows, K = xs.cols;
  expect_dtype(out, DType::kBF16, "moe_quantize_nvfp4_rows out");
  expect_shape(out, R, K, "moe_quantize_nvfp4_rows out");
  if (R != d.rows()) {
    throw Error("moe_quantize_nvfp4_rows: " + std::to_string(R) + " rows for a dispatch of " + std::to_string(d.rows()));
  }
  if (K % kBlock != 0 || !rows_aligned16(xs) || !rows_aligned16(out)) {
    throw Error("moe_quantize_nvfp4_rows: K a multiple of 16 and 16-byte aligned rows, got " + xs.describe());
  }
  if (input_scale == nullptr || d.expert_offsets == nullptr) throw Error("moe_quantize_nvfp4_rows: no input scales or dispatch");
  if (R == 0) return;
  const int64_t blocks = (R * (K / kBlock) + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX || K > INT32_MAX / 2) throw Error("moe_quantize_nvfp4_rows: too many rows or columns");
  const dim3 grid(static_cast<unsigned>(blocks));
  const int experts = static_cast<int>(d.experts), rows = static_cast<int>(R), k = static_cast<int>(K);
  if (xs.dtype == DType::kBF16) {
    nvfp4_rows_kernel<bf16><<<grid, kThreads, 0, stream>>>(xs.as<const bf16>(), xs.ld, input_scale, d.expert_offsets,
                                                             experts, out.as<bf16>(), out.ld, rows, k);
  } else if (xs.dtype == DType::kF32) {
    nvfp4_rows_kernel<float><<<grid, kThreads, 0, stream>>>(xs.as<const float>(), xs.ld, input_scale, d.expert_offsets,
                                                              experts, out.as<bf16>(), out.ld, rows, k);
  } else {
    throw Error("moe_quantize_nvfp4_rows: f32 or bf16 rows, got " + xs.describe());
  }
  K3_CUDA_CHECK_LAUNCH("nvfp4_rows_kernel");
}

}  // namespace k3::cuda
