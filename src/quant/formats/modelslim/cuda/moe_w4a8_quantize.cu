// The W4A8 activation contract on the GPU (moe_w4a8.h): rows quantised to int8 per row, from a plain
// matrix (moe_quantize_int8_rows) or from GEMM 1's gate and up halves with the gated activation
// applied in the same pass (moe_quantize_int8_activation, GEMM 2's input; bit for bit the activation
// kernel's bf16 output quantised).
#include <string>

#include "backend/cuda/ops/activation.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/core/launch.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"

namespace k3::cuda {
namespace {

constexpr int kQuantThreads = 256;  // one CTA per row, 8 values per thread and chunk
constexpr int kQuantHeld = 4;       // chunks a thread keeps in registers: rows up to 8192 values are read once

// The CPU's prepare_int8 (Int8PerToken) rule: s = amax / 127, code = clamp(rint(x / s), ±127), both
// divisions IEEE round-to-nearest, rint ties to even; amax 0 gives s = 0 and zero codes. A CTA per row
// with every load of the row in flight at once (a decode step quantises a few rows: latency, not
// bytes, is what counts); values past kQuantHeld chunks per thread are read (or formed) again for the
// codes. Launched as a programmatic dependent: nothing is read before the wait.
template <class Src>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_kernel(Src src, int k, int8_t* __restrict__ q, int64_t ldq, float* __restrict__ scale) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  constexpr int kStride = kQuantThreads * detail::kVec;
  __shared__ float warp_amax[kQuantThreads / 32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  float held[kQuantHeld][detail::kVec];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kQuantHeld; ++j) {
    const int c = tid * detail::kVec + j * kStride;
    if (c < k) {
      src.load8(row, c, held[j]);
#pragma unroll
      for (int i = 0; i < detail::kVec; ++i) amax = fmaxf(amax, fabsf(held[j][i]));
    }
  }
  for (int c = tid * detail::kVec + kQuantHeld * kStride; c < k; c += kStride) {
    float v[detail::kVec];
    src.load8(row, c, v);
#pragma unroll
    for (int i = 0; i < detail::kVec; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = detail::warp_max(amax);
  if ((tid & 31) == 0) warp_amax[tid / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float s = __fdiv_rn(amax, 127.0f);
  if (tid == 0) scale[row] = s;
  int8_t* qr = q + row * ldq;
  const auto put = [&](int c, const float (&v)[detail::kVec]) {
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < detail::kVec; ++i) {
      const int code = amax > 0.0f ? max(-127, min(127, __float2int_rn(__fdiv_rn(v[i], s)))) : 0;
      packed[i / 4] |= (static_cast<uint32_t>(code) & 0xFFu) << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(qr + c) = make_uint2(packed[0], packed[1]);
  };
#pragma unroll
  for (int j = 0; j < kQuantHeld; ++j) {
    const int c = tid * detail::kVec + j * kStride;
    if (c < k) put(c, held[j]);
  }
  for (int c = tid * detail::kVec + kQuantHeld * kStride; c < k; c += kStride) {
    float v[detail::kVec];
    src.load8(row, c, v);
    put(c, v);
  }
}

// The checks on the codes and scales both entries share; false when there is nothing to do.
bool check_output(int64_t rows, int64_t k, const Int8Rows& q, const char* what) {
  expect_dtype(q.codes, DType::kU8, (std::string(what) + " codes").c_str());
  expect_shape(q.codes, rows, k, (std::string(what) + " codes").c_str());
  if (q.scale == nullptr) throw Error(std::string(what) + ": no scale buffer");
  if (reinterpret_cast<uintptr_t>(q.codes.data) % 8 != 0 || q.codes.ld % 8 != 0) {
    throw Error(std::string(what) + ": needs 8-byte aligned code rows, got " + q.codes.describe());
  }
  if (rows > INT32_MAX || k > INT32_MAX / 2) throw Error(std::string(what) + ": too many rows or columns");
  return rows > 0;
}

template <class Src>
void launch(const Src& src, int64_t rows, int64_t k, const Int8Rows& q, cudaStream_t stream) {
  launch_dependent(quantize_rows_kernel<Src>, dim3(static_cast<unsigned>(rows)), dim3(kQuantThreads), 0, stream, src,
                   static_cast<int>(k), static_cast<int8_t*>(q.codes.data), q.codes.ld, q.scale);
}

}  // namespace

void moe_quantize_int8_rows(const DeviceTensor& x, const Int8Rows& q, cudaStream_t stream) {
  if (x.dtype != DType::kF32 && x.dtype != DType::kBF16) {
    throw Error("moe_quantize_int8_rows: x must be f32 or bf16, got " + x.describe());
  }
  if (!vec8_ok(x)) {
    throw Error("moe_quantize_int8_rows: needs K % 8 == 0 and 16-byte aligned rows of x, got " + x.describe());
  }
  if (!check_output(x.rows, x.cols, q, "moe_quantize_int8_rows")) return;
  if (x.dtype == DType::kF32) {
    launch(detail::RowsSource<float>{x.as<const float>(), x.ld}, x.rows, x.cols, q, stream);
  } else {
    launch(detail::RowsSource<detail::bf16>{x.as<const detail::bf16>(), x.ld}, x.rows, x.cols, q, stream);
  }
}

void moe_quantize_int8_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                  const Int8Rows& q, cudaStream_t stream) {
  check_gated_activation(act, gate, up, "moe_quantize_int8_activation");
  expect_dtype(gate, DType::kBF16, "moe_quantize_int8_activation gate");
  if (!check_output(gate.rows, gate.cols, q, "moe_quantize_int8_activation")) return;
  act::visit_activated(act, gate, up, [&](const auto& src) { launch(src, gate.rows, gate.cols, q, stream); });
}

}  // namespace k3::cuda
