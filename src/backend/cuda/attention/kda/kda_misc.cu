// KDA's small kernels: the gated RMSNorm of the prefill output (spec §6.7; the decode step fuses it)
// and the state-slot copy / zero (save, restore, new sequence; spec §10).
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::load4;
using detail::store4;
constexpr int D = kKdaHeadDim;


// One warp per (row, head): y = o · r · w · sigmoid(g), r = 1/sqrt(mean(o²) + eps).
template <typename Tin, typename Tout>
__global__ void __launch_bounds__(256) gated_norm_kernel(const Tin* __restrict__ o, int64_t ldo, const Tin* __restrict__ g,
                                                         int64_t ldg, const float* __restrict__ w, float eps,
                                                         Tout* __restrict__ y, int64_t ldy, int64_t rows, int heads) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (item >= rows * heads) return;
  const int64_t r = item / heads;
  const int h = static_cast<int>(item % heads), c0 = (threadIdx.x & 31) * 4;
  float x[4], gg[4];
  load4(o + r * ldo + h * D + c0, x);
  load4(g + r * ldg + h * D + c0, gg);
  float ss = x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
  ss = detail::warp_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = x[e] * rs * w[c0 + e] * (1.0f / (1.0f + expf(-gg[e])));
  store4(y + r * ldy + h * D + c0, x);
}

// dst slot i ← src slot i (src == nullptr: ← 0), per_slot floats (a multiple of 4) each.
__global__ void copy_slots_kernel(float* __restrict__ dst, const int32_t* __restrict__ dst_slots,
                                  const float* __restrict__ src, const int32_t* __restrict__ src_slots,
                                  int64_t per_slot) {
  const int i = blockIdx.y;
  float4* d = reinterpret_cast<float4*>(dst + static_cast<int64_t>(dst_slots[i]) * per_slot);
  const float4* s = src != nullptr ? reinterpret_cast<const float4*>(src + static_cast<int64_t>(src_slots[i]) * per_slot)
                                   : nullptr;
  const int64_t n4 = per_slot / 4;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n4;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    d[j] = s != nullptr ? s[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

void copy_slots(float* dst, const int32_t* dst_slots, const float* src, const int32_t* src_slots, int n,
                size_t per_slot, cudaStream_t stream) {
  if (n == 0 || per_slot == 0) return;
  if (per_slot % 4 != 0) throw Error("kda state: slot size not a multiple of 4 floats");
  const int64_t n4 = static_cast<int64_t>(per_slot / 4);
  const unsigned bx = static_cast<unsigned>(std::min<int64_t>((n4 + 255) / 256, 512));
  copy_slots_kernel<<<dim3(bx, static_cast<unsigned>(n)), 256, 0, stream>>>(dst, dst_slots, src, src_slots,
                                                                           static_cast<int64_t>(per_slot));
  K3_CUDA_CHECK_LAUNCH("copy_slots_kernel");
}

void check_same(const KdaStatePool& a, const KdaStatePool& b) {
  if (a.heads != b.heads || a.head_dim != b.head_dim || a.conv_width != b.conv_width) {
    throw Error("kda_state_copy: pools of different shapes");
  }
}

}  // namespace

void kda_gated_rms_norm(const DeviceTensor& o, const DeviceTensor& g, const float* w, float eps, const DeviceTensor& y,
                        cudaStream_t stream) {
  expect_shape(g, o.rows, o.cols, "kda_gated_rms_norm gate");
  expect_shape(y, o.rows, o.cols, "kda_gated_rms_norm output");
  expect_dtype(g, o.dtype, "kda_gated_rms_norm gate");
  if (o.cols % D != 0) throw Error("kda_gated_rms_norm: width is not a multiple of 128: " + o.describe());
  for (const DeviceTensor* t : {&o, &g, &y}) {
    if (!vec8_ok(*t)) throw Error("kda_gated_rms_norm: needs 16-byte aligned rows, got " + t->describe());
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16) throw Error("kda_gated_rms_norm: f32 or bf16, got " + t->describe());
  }
  const int heads = static_cast<int>(o.cols / D);
  const int64_t warps = o.rows * heads;
  if (warps == 0) return;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  const bool ib = o.dtype == DType::kBF16, ob = y.dtype == DType::kBF16;
#define K3_GN(TI, TO)                                                                                           \
  gated_norm_kernel<TI, TO><<<blocks, 256, 0, stream>>>(o.as<const TI>(), o.ld, g.as<const TI>(), g.ld, w, eps, \
                                                        y.as<TO>(), y.ld, o.rows, heads)
  if (ib && ob) K3_GN(bf16, bf16);
  if (ib && !ob) K3_GN(bf16, float);
  if (!ib && ob) K3_GN(float, bf16);
  if (!ib && !ob) K3_GN(float, float);
#undef K3_GN
  K3_CUDA_CHECK_LAUNCH("gated_norm_kernel");
}

void kda_state_copy(const KdaStatePool& src, const int32_t* src_slots, const KdaStatePool& dst,
                    const int32_t* dst_slots, int n, cudaStream_t stream) {
  check_same(src, dst);
  copy_slots(dst.recurrent, dst_slots, src.recurrent, src_slots, n, src.recurrent_floats_per_slot(), stream);
  copy_slots(dst.conv, dst_slots, src.conv, src_slots, n, src.conv_floats_per_slot(), stream);
}

void kda_state_zero(const KdaStatePool& pool, const int32_t* slots, int n, cudaStream_t stream) {
  copy_slots(pool.recurrent, slots, nullptr, nullptr, n, pool.recurrent_floats_per_slot(), stream);
  copy_slots(pool.conv, slots, nullptr, nullptr, n, pool.conv_floats_per_slot(), stream);
}

}  // namespace k3::cuda
