// The FP8-block experts' decode kernel (moe_fp8_block.h, Fp8ExpertKernel::kDecode): the kM16 tile of
// the grouped GEMM (≤ 16 rows of one expert × 64 weight rows per CTA), with the e4m3 codes streamed
// HBM → shared memory by cp.async, kStages − 1 stages of 128 columns in flight per CTA, and decoded
// there to a bf16 tile by the CTA's threads — where the tile kernel's threads load the codes
// themselves and keep too few bytes in flight to stream at the read ceiling.
//
// A stage is 64 weight rows × 128 columns: one multiplier (the CTA's 64 rows lie in one 128-row block,
// N % 128 == 0), so the decode is bf16(code · multiplier) per element from one scalar, the value the
// tile kernel stores. The MMAs are the tile kernel's (moe_grouped_gemm.cuh, CfgM16: activations the
// A operand, warp w the weight rows 16w…16w + 15, k16 steps in ascending order), so the results are
// the tile kernel's bit for bit. Needs K % 16 == 0 (16-byte copies of code rows).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/moe/moe_grouped_gemm.cuh"
#include "backend/cuda/moe/moe_tile.cuh"
#include "quant/formats/fp8/cuda/moe_fp8_block_internal.h"

namespace k3::cuda::fp8_experts {
namespace {

using namespace mla_detail;  // cp.async, ldmatrix and mma.sync helpers
using grouped_gemm::store2;

constexpr int kRows = 64;      // weight rows per CTA
constexpr int kTokens = 16;    // activation rows per CTA (a kM16 tile)
constexpr int kBK = 128;       // columns per stage
constexpr int kStages = 5;
constexpr int kThreads = 128;  // 4 warps, 16 weight rows each
constexpr int kLds = kBK + 8;  // padded bf16 rows: conflict-free ldmatrix
constexpr int kRawBytes = kRows * kBK;                  // one stage of codes
constexpr int kXElems = kTokens * kLds;                 // one stage of activations
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * (kRawBytes + kXElems * 2) + kRows * kLds * 2;

// Sixteen e4m3 codes times the multiplier as bf16 (RNE from the f32 product), into dst (16-byte aligned).
__device__ __forceinline__ void decode16(const uint4 q, float m, bf16* dst) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * h) & 0xFFFFu), __NV_E4M3);
      const float2 f = __half22float2(__half2(r));
      out[2 * i + h] = pack_bf16(f.x * m, f.y * m);
    }
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

template <typename Tout>
__global__ void __launch_bounds__(kThreads, 2) fp8_decode_kernel(DecodeArgs a) {
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(a.n_tiles, kTokens, kRows, a.tile_count, a.tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint8_t* raw = smem_raw;                                               // [stages][64][128] codes
  bf16* sx = reinterpret_cast<bf16*>(smem_raw + kStages * kRawBytes);    // [stages][16][kLds]
  bf16* sw = sx + kStages * kXElems;                                     // [64][kLds], the decoded stage
  const bf16* x = static_cast<const bf16*>(a.x);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ktiles = (a.k + kBK - 1) / kBK;
  const int64_t wrow0 = static_cast<int64_t>(expert) * a.n + n0;  // the CTA's first bank row
  const float* multipliers = a.scales + wrow0 / kFp8ExpertBlock * a.scale_ld;

  // Copies: codes as 16-byte chunks, chunk tid % 8 of rows tid / 8 + 16i; activations chunk tid % 16
  // of rows tid / 16 + 8i; zeros past K and past the tile's rows.
  auto load_stage = [&](int kt) {
    const int slot = kt % kStages, k0 = kt * kBK;
    const int cw = k0 + (tid & 7) * 16;
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      const int row = (tid >> 3) + 16 * i;
      const bool ok = cw < a.k;
      cp_async16(raw + slot * kRawBytes + row * kBK + (tid & 7) * 16, ok ? a.codes + (wrow0 + row) * a.k + cw : a.codes,
                 ok ? 16 : 0);
    }
    const int cx = k0 + (tid & 15) * 8;
#pragma unroll
    for (int i = 0; i < kTokens / 8; ++i) {
      const int row = (tid >> 4) + 8 * i;
      const bool ok = cx < a.k && row < rows;
      cp_async16(sx + slot * kXElems + row * kLds + (tid & 15) * 8,
                 ok ? x + static_cast<int64_t>(r0 + row) * a.ldx + cx : x, ok ? 16 : 0);
    }
  };

  float acc[2][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(s);
    cp_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    // Stage kt landed for every thread; every warp is past the MMAs of stage kt − 1, so the decoded
    // tile and stage kt − 1's slot are free.
    cp_wait<kStages - 2>();
    __syncthreads();
    if (kt + kStages - 1 < ktiles) load_stage(kt + kStages - 1);
    cp_commit();
    const int slot = kt % kStages;
    const float m = multipliers[kt];
#pragma unroll
    for (int i = 0; i < kRawBytes / 16 / kThreads; ++i) {
      const int chunk = tid + kThreads * i, row = chunk >> 3, c16 = chunk & 7;
      decode16(*reinterpret_cast<const uint4*>(raw + slot * kRawBytes + row * kBK + c16 * 16), m,
               sw + row * kLds + c16 * 16);
    }
    __syncthreads();
    const bf16* tx = sx + slot * kXElems;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[4], bfr[4];
      load_a_ldsm(af, tx, kLds, 0, kk * 16, lane);
      load_b_nk_ldsm(bfr, sw, kLds, warp * 16, kk * 16, lane);
      mma_bf16(acc[0], af, bfr[0], bfr[1]);
      mma_bf16(acc[1], af, bfr[2], bfr[3]);
    }
  }
  cp_wait<0>();

  // Fragment layout: c0, c1 = row g, columns 2t, 2t+1 of the n8 tile; c2, c3 = row g + 8.
  Tout* yt = static_cast<Tout*>(a.y) + static_cast<int64_t>(r0) * a.ldy;
  const int g = lane >> 2, t = lane & 3;
  const float w0 = a.row_weight != nullptr && g < rows ? a.row_weight[r0 + g] : 1.0f;
  const float w1 = a.row_weight != nullptr && g + 8 < rows ? a.row_weight[r0 + g + 8] : 1.0f;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int col = n0 + warp * 16 + n * 8 + 2 * t;
    if (g < rows) store2(yt + static_cast<int64_t>(g) * a.ldy + col, acc[n][0] * w0, acc[n][1] * w0);
    if (g + 8 < rows) store2(yt + static_cast<int64_t>(g + 8) * a.ldy + col, acc[n][2] * w1, acc[n][3] * w1);
  }
}

template <typename Tout>
void launch_out(DecodeArgs a, const MoeTileMap& map, cudaStream_t stream) {
  a.n_tiles = a.n / kRows;
  a.tile_count = map.count;
  a.tiles = reinterpret_cast<const int4*>(map.tiles);
  const int64_t blocks = static_cast<int64_t>(a.n_tiles) * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemm_fp8_block: grid too large");
  allow_dynamic_smem(fp8_decode_kernel<Tout>, kSmemBytes);
  fp8_decode_kernel<Tout><<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("fp8_decode_kernel");
}

}  // namespace

bool decode_fits(int64_t n, int64_t k) { return n % kRows == 0 && k % 16 == 0; }

void launch_decode(const DecodeArgs& a, const MoeTileMap& map, bool f32_out, cudaStream_t stream) {
  if (f32_out) {
    launch_out<float>(a, map, stream);
  } else {
    launch_out<bf16>(a, map, stream);
  }
}

}  // namespace k3::cuda::fp8_experts
