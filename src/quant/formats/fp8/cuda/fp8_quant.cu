// FP8 E4M3 activation quantisation in front of the FP8 GEMMs.
// 1×128: a warp quantises four consecutive rows' two 128-blocks (16 lanes × 8 values per block and
// row: 16-byte loads, a 4-step shuffle max per block); the four rows' loads are issued before any
// reduction, so each thread keeps 64 bytes in flight. A CTA's 8 warps take 32 consecutive rows of
// the same K-blocks, so the scales, stored token-contiguous for cuBLASLt (scales[b·M + m]), leave as
// 16-byte runs per warp and 128-byte runs per CTA.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerCta = kWarps * kRowsPerWarp;

__device__ __forceinline__ uint2 encode8(const float (&v)[kVec], float scale) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
      // x / scale with IEEE division (bit-exact with the CPU producer rule), then RNE, satfinite.
      const float2 pair = make_float2(v[4 * h + k] / scale, v[4 * h + k + 1] / scale);
      const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
      word |= static_cast<uint32_t>(two) << (8 * k);
    }
    w[h] = word;
  }
  return make_uint2(w[0], w[1]);
}

template <typename Tin>
__global__ void __launch_bounds__(32 * kWarps) quant_1x128_kernel(const Tin* __restrict__ x, int64_t ldx,
                                                                  uint8_t* __restrict__ q, int64_t ldq,
                                                                  float* __restrict__ scales, int Mx, int Mq, int K) {
  const int lane = threadIdx.x, sub = lane & 15;
  const int m0 = blockIdx.y * kRowsPerCta + threadIdx.y * kRowsPerWarp;
  const int b = blockIdx.x * 2 + (lane >> 4);  // this half-warp's K-block
  const int col = b * 128 + sub * kVec;
  if (m0 >= Mq) return;  // whole warp leaves together
  const bool active = col < K;
  float v[kRowsPerWarp][kVec];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (active && m0 + r < Mx) {
      detail::load8(x + static_cast<int64_t>(m0 + r) * ldx + col, v[r]);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[r][k] = 0.0f;  // padding rows: zero codes, scale 1
    }
  }
  float scale[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) amax = fmaxf(amax, fabsf(v[r][k]));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    scale[r] = amax > 0.0f ? amax / 448.0f : 1.0f;
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (m0 + r < Mq) *reinterpret_cast<uint2*>(q + static_cast<int64_t>(m0 + r) * ldq + col) = encode8(v[r], scale[r]);
  }
  // Lane r of each half stores row m0 + r's scale of the half's block.
  float mine = scale[0];
#pragma unroll
  for (int r = 1; r < kRowsPerWarp; ++r) mine = sub == r ? scale[r] : mine;
  if (sub < kRowsPerWarp && m0 + sub < Mq) scales[static_cast<int64_t>(b) * Mq + m0 + sub] = mine;
}

template <typename Tin>
__global__ void quant_tensor_kernel(const Tin* __restrict__ x, int64_t ldx, const float* __restrict__ scale,
                                    uint8_t* __restrict__ q, int64_t ldq, int64_t rows, int64_t vec_per_row) {
  const float s = *scale;
  const int64_t total = rows * vec_per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / vec_per_row, c = (idx - r * vec_per_row) * kVec;
    float v[kVec];
    detail::load8(x + r * ldx + c, v);
    *reinterpret_cast<uint2*>(q + r * ldq + c) = encode8(v, s);
  }
}

void check_io(const DeviceTensor& x, const DeviceTensor& q, const char* what) {
  expect_dtype(q, DType::kE4M3, what);
  if (x.dtype != DType::kF32 && x.dtype != DType::kBF16) {
    throw Error(std::string(what) + ": input must be f32 or bf16, got " + x.describe());
  }
  if (!vec8_ok(x) || q.cols % 8 != 0 || reinterpret_cast<uintptr_t>(q.data) % 8 != 0 || q.ld % 8 != 0) {
    throw Error(std::string(what) + ": needs cols % 8 == 0 and aligned rows, got " + x.describe() + " -> " +
                q.describe());
  }
}

}  // namespace

void quantize_fp8_1x128(const DeviceTensor& x, const DeviceTensor& q, float* scales, cudaStream_t stream) {
  check_io(x, q, "quantize_fp8_1x128");
  if (q.cols != x.cols || q.rows < x.rows) {
    throw Error("quantize_fp8_1x128: codes must be [>= " + std::to_string(x.rows) + ", " + std::to_string(x.cols) +
                "], got " + q.describe());
  }
  if (q.rows > INT32_MAX / 2 || x.cols > INT32_MAX / 2) throw Error("quantize_fp8_1x128: too large");
  if (q.numel() == 0) return;
  const int Mx = static_cast<int>(x.rows), M = static_cast<int>(q.rows), K = static_cast<int>(x.cols);
  const int kblocks = (K + 127) / 128;
  const dim3 grid((kblocks + 1) / 2, (M + kRowsPerCta - 1) / kRowsPerCta);
  const dim3 block(32, kWarps);
  if (x.dtype == DType::kF32) {
    quant_1x128_kernel<float><<<grid, block, 0, stream>>>(x.as<const float>(), x.ld, q.as<uint8_t>(), q.ld, scales, Mx, M, K);
  } else {
    quant_1x128_kernel<bf16><<<grid, block, 0, stream>>>(x.as<const bf16>(), x.ld, q.as<uint8_t>(), q.ld, scales, Mx, M, K);
  }
  K3_CUDA_CHECK_LAUNCH("quant_1x128_kernel");
}

void quantize_fp8_tensor(const DeviceTensor& x, const float* scale, const DeviceTensor& q, cudaStream_t stream) {
  check_io(x, q, "quantize_fp8_tensor");
  expect_shape(q, x.rows, x.cols, "quantize_fp8_tensor codes");
  if (x.numel() == 0) return;
  const int64_t vec_per_row = x.cols / kVec, total = x.rows * vec_per_row;
  constexpr int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 132 * 16);
  if (x.dtype == DType::kF32) {
    quant_tensor_kernel<float><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        x.as<const float>(), x.ld, scale, q.as<uint8_t>(), q.ld, x.rows, vec_per_row);
  } else {
    quant_tensor_kernel<bf16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        x.as<const bf16>(), x.ld, scale, q.as<uint8_t>(), q.ld, x.rows, vec_per_row);
  }
  K3_CUDA_CHECK_LAUNCH("quant_tensor_kernel");
}

}  // namespace k3::cuda
