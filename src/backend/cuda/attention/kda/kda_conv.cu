// KDA short causal depthwise conv + SiLU (spec §6.2) with the per-slot conv state (CPU reference:
// short_conv in backend/cpu/kda.cpp). Each thread owns 8 consecutive channels (16-byte loads) and
// walks a tile of up to kTile tokens of one sequence with the W−1 previous inputs in registers; the
// tiles of a sequence run in parallel. Only the first tile reads the slot's old conv state, and the
// same threads write the new state after they have read the old one, so there is no race between
// the tiles. The same kernel serves prefill (many rows per sequence) and decode (one row).
#include <algorithm>
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kThreads = 128;
constexpr int kTile = 64;

__device__ __forceinline__ float silu(float x) { return x * (1.0f / (1.0f + expf(-x))); }

struct ConvArgs {
  const int32_t* cu;
  const int32_t* slots;
  const void* x;
  int64_t ldx;
  const float* w;
  float* state;
  int64_t state_per_slot;  // floats
  int64_t P;               // channels per state group
  int channels;
  void* y;
  int64_t ldy;
};

template <typename Tin, typename Tout, int W>
__global__ void __launch_bounds__(kThreads) short_conv_kernel(ConvArgs a) {
  const int s = blockIdx.y;
  const int c0 = (blockIdx.x * kThreads + threadIdx.x) * kVec;
  const int row0 = a.cu != nullptr ? a.cu[s] : s;
  const int len = a.cu != nullptr ? a.cu[s + 1] - row0 : 1;
  const int t0 = blockIdx.z * kTile;
  if (c0 >= a.channels || t0 >= len) return;
  const Tin* x = static_cast<const Tin*>(a.x);
  Tout* y = static_cast<Tout*>(a.y);
  constexpr int H = W - 1;  // history length
  float w[kVec][W];
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
#pragma unroll
    for (int j = 0; j < W; ++j) w[e][j] = a.w[static_cast<int64_t>(c0 + e) * W + j];
  }
  float* st = a.state + static_cast<int64_t>(a.slots[s]) * a.state_per_slot + (c0 / a.P) * H * a.P + c0 % a.P;
  // hist[j] = input(t0 − H + j); input(t < 0) comes from the old state (oldest first).
  float hist[H > 0 ? H : 1][kVec];
#pragma unroll
  for (int j = 0; j < H; ++j) {
    const int t = t0 - H + j;
    if (t < 0) {
      detail::load8(st + (H + t) * a.P, hist[j]);
    } else {
      detail::load8(x + (row0 + t) * a.ldx + c0, hist[j]);
    }
  }
  // The new state (first tile only): input(len − H + j), read before anything is written.
  float next[H > 0 ? H : 1][kVec];
  if (blockIdx.z == 0) {
#pragma unroll
    for (int j = 0; j < H; ++j) {
      const int t = len - H + j;
      if (t < 0) {
        detail::load8(st + (H + t) * a.P, next[j]);
      } else {
        detail::load8(x + (row0 + t) * a.ldx + c0, next[j]);
      }
    }
  }
  const int t1 = min(len, t0 + kTile);
  for (int t = t0; t < t1; ++t) {
    float cur[kVec], out[kVec];
    detail::load8(x + static_cast<int64_t>(row0 + t) * a.ldx + c0, cur);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < H; ++j) acc += w[e][j] * hist[j][e];
      acc += w[e][H] * cur[e];
      out[e] = silu(acc);
    }
    detail::store8(y + static_cast<int64_t>(row0 + t) * a.ldy + c0, out);
#pragma unroll
    for (int j = 0; j + 1 < H; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) hist[j][e] = hist[j + 1][e];
    }
    if (H > 0) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) hist[H - 1][e] = cur[e];
    }
  }
  if (blockIdx.z == 0) {
#pragma unroll
    for (int j = 0; j < H; ++j) detail::store8(st + j * a.P, next[j]);
  }
}

template <typename Tin, typename Tout>
void launch_width(const ConvArgs& a, int width, dim3 grid, cudaStream_t stream) {
  switch (width) {
    case 2: short_conv_kernel<Tin, Tout, 2><<<grid, kThreads, 0, stream>>>(a); break;
    case 3: short_conv_kernel<Tin, Tout, 3><<<grid, kThreads, 0, stream>>>(a); break;
    case 4: short_conv_kernel<Tin, Tout, 4><<<grid, kThreads, 0, stream>>>(a); break;
    default: throw Error("kda_short_conv: conv width " + std::to_string(width) + " is not built (2..4)");
  }
  K3_CUDA_CHECK_LAUNCH("short_conv_kernel");
}

}  // namespace

void kda_short_conv(const KdaBatch& batch, const DeviceTensor& x, const float* weight, const KdaStatePool& pool,
                    const DeviceTensor& y, cudaStream_t stream) {
  const int64_t P = pool.proj_dim();
  expect_shape(y, x.rows, x.cols, "kda_short_conv output");
  if (x.cols % P != 0 || x.cols / P > 3 || P % kVec != 0) {
    throw Error("kda_short_conv: channels must be 1..3 groups of P = " + std::to_string(P) + " (P % 8 == 0), got " +
                x.describe());
  }
  if (!vec8_ok(x) || !vec8_ok(y)) throw Error("kda_short_conv: needs 16-byte aligned rows, got " + x.describe());
  const int64_t rows_needed = batch.cu_seqlens != nullptr ? batch.total_rows : batch.n;
  if (x.rows != rows_needed) {
    throw Error("kda_short_conv: " + std::to_string(x.rows) + " rows for a batch of " + std::to_string(rows_needed));
  }
  if (batch.n == 0 || x.cols == 0) return;
  const bool xb = x.dtype == DType::kBF16, yb = y.dtype == DType::kBF16;
  if ((!xb && x.dtype != DType::kF32) || (!yb && y.dtype != DType::kF32)) {
    throw Error("kda_short_conv: f32 or bf16 only, got " + x.describe() + " -> " + y.describe());
  }
  ConvArgs a{batch.cu_seqlens, batch.slots, x.data, x.ld, weight, pool.conv,
             static_cast<int64_t>(pool.conv_floats_per_slot()), P, static_cast<int>(x.cols), y.data, y.ld};
  const int max_len = batch.cu_seqlens != nullptr ? batch.max_len : 1;
  const dim3 grid(static_cast<unsigned>((x.cols / kVec + kThreads - 1) / kThreads), static_cast<unsigned>(batch.n),
                  static_cast<unsigned>((std::max(max_len, 1) + kTile - 1) / kTile));
  const int width = static_cast<int>(pool.conv_width);
  if (xb && yb) launch_width<bf16, bf16>(a, width, grid, stream);
  if (xb && !yb) launch_width<bf16, float>(a, width, grid, stream);
  if (!xb && yb) launch_width<float, bf16>(a, width, grid, stream);
  if (!xb && !yb) launch_width<float, float>(a, width, grid, stream);
}

}  // namespace k3::cuda
