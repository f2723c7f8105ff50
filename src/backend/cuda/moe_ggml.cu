// GGUF expert kernels (moe_ggml.h): activation quantisation, the decode grouped GEMV and the bf16
// dequantisation for prefill, one template each over the block traits of moe_ggml_blocks.h.
#include "backend/cuda/moe_ggml.h"

#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ggml_blocks.h"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/upload.h"

namespace k3::cuda {
namespace {

namespace gb = ggml_blocks;
using detail::bf16;

// ---- activation quantisation ------------------------------------------------------------------------

constexpr int kQuantThreads = 256;  // 8 values per thread: 2048 values per CTA, whole blocks of 32 or 256

// One thread per 8 values of one row; the BLOCK / 8 lanes of a block reduce its amax by shuffles.
template <int BLOCK, typename Tin>
__global__ void __launch_bounds__(kQuantThreads) quantize_kernel(const Tin* __restrict__ x, int64_t ldx, int k,
                                                                 MoeGgmlActs a) {
  constexpr int kLanes = BLOCK / 8;
  const int64_t row = blockIdx.x;
  const int col = (blockIdx.y * kQuantThreads + threadIdx.x) * 8;
  const bool valid = col < k;  // lanes past K take part in the shuffles with zeros
  float v[8] = {};
  if (valid) detail::load8(x + row * ldx + col, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  uint32_t packed[2] = {0, 0};
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = static_cast<int>(fminf(fmaxf(rintf(__fmul_rn(v[i], inv)), -127.0f), 127.0f));
    sum += c;
    packed[i / 4] |= (static_cast<uint32_t>(c) & 0xFFu) << (8 * (i % 4));
  }
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);  // the 16 values of threads 2j, 2j+1
  if (!valid) return;
  *reinterpret_cast<uint2*>(a.q + row * k + col) = make_uint2(packed[0], packed[1]);
  if ((col / 8) % 2 == 0) a.sums[row * (k / 16) + col / 16] = static_cast<int16_t>(sum);
  if (col % BLOCK == 0) a.scale[row * (k / BLOCK) + col / BLOCK] = __fdiv_rn(amax, 127.0f);
}

// ---- decode grouped GEMV ------------------------------------------------------------------------------

constexpr int kGemvWarps = 8;
// Weight rows a warp streams together. 1 with 3 CTAs per SM (80 registers, a few bytes spilled by
// ptxas) was chosen from the ptxas report alone (2 rows: 150-210 registers, one CTA per SM); to be
// tuned on the H200.
constexpr int kGemvRowsPerWarp = 1;
constexpr int kGemvRows = 128;  // weight rows per CTA: 8 warps × 16 passes
constexpr int kGemvTokens = 16;      // the kM16 tile map's height

struct GemvArgs {
  const uint8_t* w;
  int64_t row_bytes;
  MoeGgmlActs x;
  void* y;
  int64_t ldy;
  int n, k;
  const int32_t* offsets;
};

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// CTA → (tile, 128 weight rows) as in moe_w4_gemm.cuh: an expert's token tiles run back to back for
// each slice of weight rows, so a slice comes from DRAM once while the expert's tiles go by. Lane l
// of a warp takes part l % kParts of block l / kParts of each 1024-element step; the next step's
// weights are loaded before the current one is multiplied.
template <class F, typename Tout>
__global__ void __launch_bounds__(kGemvWarps * 32, 3) gemv_kernel(GemvArgs a, int n_slices,
                                                               const int32_t* __restrict__ tile_count,
                                                               const int4* __restrict__ tiles) {
  constexpr int kPerStep = 32 / F::kParts;  // blocks per warp step
  constexpr int RW = kGemvRowsPerWarp;
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(n_slices, kGemvTokens, kGemvRows, tile_count, tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % F::kParts, lb = lane / F::kParts;
  const int nb = a.k / F::kBlock, steps = (nb + kPerStep - 1) / kPerStep;
  const int ab = a.k / F::kBlock;  // activation blocks per row (the activation block is the weight block)

  for (int f0 = n0 + warp * RW; f0 < min(n0 + kGemvRows, a.n); f0 += kGemvWarps * RW) {
    const uint8_t* wr[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
      wr[i] = a.w + (static_cast<int64_t>(expert) * a.n + min(f0 + i, a.n - 1)) * a.row_bytes;
    }
    float acc[RW][kGemvTokens];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
#pragma unroll
      for (int t = 0; t < kGemvTokens; ++t) acc[i][t] = 0.0f;
    }
    typename F::W next[RW];
    if (lb < nb) {
#pragma unroll
      for (int i = 0; i < RW; ++i) next[i] = F::load(wr[i] + static_cast<int64_t>(lb) * F::kBytes, part);
    }
    for (int s = 0; s < steps; ++s) {
      const int b = s * kPerStep + lb;
      typename F::W cur[RW];
#pragma unroll
      for (int i = 0; i < RW; ++i) cur[i] = next[i];
      if (b + kPerStep < nb) {
#pragma unroll
        for (int i = 0; i < RW; ++i) next[i] = F::load(wr[i] + static_cast<int64_t>(b + kPerStep) * F::kBytes, part);
      }
      if (b >= nb) continue;
#pragma unroll
      for (int t = 0; t < kGemvTokens; ++t) {
        if (t >= rows) break;
        const int64_t xr = r0 + t;
        const gb::ActBlock x{a.x.q + xr * a.k + static_cast<int64_t>(b) * F::kBlock,
                             a.x.sums + xr * (a.k / 16) + static_cast<int64_t>(b) * (F::kBlock / 16),
                             a.x.scale[xr * ab + b]};
#pragma unroll
        for (int i = 0; i < RW; ++i) acc[i][t] += F::dot(cur[i], part, x);
      }
    }
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
      if (t >= rows) break;
#pragma unroll
      for (int i = 0; i < RW; ++i) {
        const float v = detail::warp_sum(acc[i][t]);
        if (lane == 0 && f0 + i < a.n) store_out(static_cast<Tout*>(a.y) + (r0 + t) * a.ldy + f0 + i, v);
      }
    }
  }
}

// ---- dequantisation to bf16 ---------------------------------------------------------------------------

constexpr int kDequantThreads = 256;

// One thread per 8 consecutive elements of one bank row (one 16-byte store); grid.y = expert, experts
// without rows in the dispatch exit.
template <class F>
__global__ void __launch_bounds__(kDequantThreads) dequant_kernel(const uint8_t* __restrict__ w, int64_t row_bytes,
                                                                  int n, int k, const int32_t* __restrict__ offsets,
                                                                  bf16* __restrict__ out, int64_t ldo) {
  const int expert = blockIdx.y;
  if (offsets[expert + 1] == offsets[expert]) return;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x) * 8;
  if (i >= static_cast<int64_t>(n) * k) return;
  const int64_t row = static_cast<int64_t>(expert) * n + i / k;
  const int col = static_cast<int>(i % k);
  const uint8_t* blk = w + row * row_bytes + static_cast<int64_t>(col / F::kBlock) * F::kBytes;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = F::value(blk, col % F::kBlock + j);
  detail::store8(out + row * ldo + col, v);
}

std::string shape_text(GgmlType type, int64_t e, int64_t n, int64_t k) {
  return std::string(ggml_type_name(type)) + " E " + std::to_string(e) + ", N " + std::to_string(n) + ", K " +
         std::to_string(k);
}

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

void check_rows16(const DeviceTensor& t, const char* what) {
  if (!rows_aligned16(t)) {
    throw Error(std::string(what) + ": needs 16-byte aligned rows, got " + t.describe());
  }
}

}  // namespace

bool moe_ggml_supported(GgmlType type) {
  return gb::visit(type, [](auto) {});
}

int64_t MoeGgmlBank::row_bytes() const {
  const GgmlTypeInfo& info = ggml_type_info(type);
  return k / info.block_size * info.type_size;
}

void moe_ggml_check_shape(GgmlType type, int64_t experts, int64_t n, int64_t k, const char* what) {
  if (!moe_ggml_supported(type)) {
    throw Error(std::string(what) + ": GGML type " + std::string(ggml_type_name(type)) + " has no GPU expert kernel");
  }
  const int64_t block = ggml_type_info(type).block_size;
  if (experts <= 0 || n <= 0 || k <= 0 || k % block != 0 || n > INT32_MAX / 2 || k > INT32_MAX / 2 || experts > 65535) {
    throw Error(std::string(what) + ": needs E in [1, 65535], N > 0 and K a positive multiple of " +
                std::to_string(block) + ", got " + shape_text(type, experts, n, k));
  }
}

MoeGgmlBank moe_ggml_alloc(Arena& arena, GgmlType type, int64_t experts, int64_t n, int64_t k, const char* what) {
  moe_ggml_check_shape(type, experts, n, k, what);
  MoeGgmlBank b;
  b.type = type, b.experts = experts, b.n = n, b.k = k;
  b.data = static_cast<uint8_t*>(arena.alloc(b.bytes(), what));
  return b;
}

void moe_ggml_upload_rows(const MoeGgmlBank& bank, int64_t row0, const uint8_t* host, int64_t rows) {
  if (row0 < 0 || rows < 0 || row0 + rows > bank.rows()) {
    throw Error("moe_ggml_upload_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) +
                ") outside the bank's " + std::to_string(bank.rows()));
  }
  copy_bytes_to_device(bank.data + row0 * bank.row_bytes(), host, static_cast<size_t>(rows * bank.row_bytes()));
}

size_t moe_ggml_acts_bytes(GgmlType type, int64_t rows, int64_t k) {
  moe_ggml_check_shape(type, 1, 1, k, "moe_ggml_acts_bytes");
  const int64_t block = ggml_type_info(type).block_size;
  return round256(static_cast<size_t>(rows * k)) + round256(static_cast<size_t>(rows * (k / block)) * 4) +
         round256(static_cast<size_t>(rows * (k / 16)) * 2);
}

MoeGgmlActs moe_ggml_acts_view(void* buffer, GgmlType type, int64_t rows, int64_t k) {
  moe_ggml_check_shape(type, 1, 1, k, "moe_ggml_acts_view");
  if (reinterpret_cast<uintptr_t>(buffer) % 256 != 0) throw Error("moe_ggml_acts_view: buffer not 256-byte aligned");
  MoeGgmlActs a;
  a.rows = rows, a.k = k, a.block = ggml_type_info(type).block_size;
  auto* p = static_cast<uint8_t*>(buffer);
  a.q = reinterpret_cast<int8_t*>(p);
  p += round256(static_cast<size_t>(rows * k));
  a.scale = reinterpret_cast<float*>(p);
  p += round256(static_cast<size_t>(rows * (k / a.block)) * 4);
  a.sums = reinterpret_cast<int16_t*>(p);
  return a;
}

void moe_ggml_quantize(const DeviceTensor& xs, const MoeGgmlActs& acts, cudaStream_t stream) {
  expect_shape(xs, acts.rows, acts.k, "moe_ggml_quantize xs");
  if (xs.dtype != DType::kBF16 && xs.dtype != DType::kF32) throw Error("moe_ggml_quantize: xs must be bf16 or f32");
  check_rows16(xs, "moe_ggml_quantize xs");
  if (acts.block != 32 && acts.block != 256) throw Error("moe_ggml_quantize: activation block must be 32 or 256");
  if (acts.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(acts.rows),
                  static_cast<unsigned>((acts.k + 8 * kQuantThreads - 1) / (8 * kQuantThreads)));
  const int k = static_cast<int>(acts.k);
  if (xs.dtype == DType::kBF16) {
    const auto* x = static_cast<const bf16*>(xs.data);
    if (acts.block == 32) {
      quantize_kernel<32><<<grid, kQuantThreads, 0, stream>>>(x, xs.ld, k, acts);
    } else {
      quantize_kernel<256><<<grid, kQuantThreads, 0, stream>>>(x, xs.ld, k, acts);
    }
  } else {
    const auto* x = static_cast<const float*>(xs.data);
    if (acts.block == 32) {
      quantize_kernel<32><<<grid, kQuantThreads, 0, stream>>>(x, xs.ld, k, acts);
    } else {
      quantize_kernel<256><<<grid, kQuantThreads, 0, stream>>>(x, xs.ld, k, acts);
    }
  }
  K3_CUDA_CHECK_LAUNCH("moe_ggml quantize_kernel");
}

void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream) {
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  moe_ggml_check_shape(bank.type, bank.experts, N, K, "moe_grouped_gemv_ggml");
  if (bank.data == nullptr) throw Error("moe_grouped_gemv_ggml: empty bank");
  if (bank.experts != d.experts) {
    throw Error("moe_grouped_gemv_ggml: bank has " + std::to_string(bank.experts) + " experts, dispatch " +
                std::to_string(d.experts));
  }
  if (acts.rows != R || acts.k != K || acts.block != ggml_type_info(bank.type).block_size) {
    throw Error("moe_grouped_gemv_ggml: activations not laid out for " + std::to_string(R) + " rows of " +
                shape_text(bank.type, bank.experts, N, K));
  }
  expect_shape(ys, R, N, "moe_grouped_gemv_ggml ys");
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) throw Error("moe_grouped_gemv_ggml: ys must be f32 or bf16");
  moe_ggml_quantize(xs, acts, stream);
  const MoeTileMap map = moe_tile_map(d, MoeTile::kM16);
  if (R == 0) return;
  const int n_slices = static_cast<int>((N + kGemvRows - 1) / kGemvRows);
  const int64_t blocks = n_slices * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemv_ggml: grid too large");
  const GemvArgs a{bank.data, bank.row_bytes(), acts, ys.data, ys.ld, static_cast<int>(N), static_cast<int>(K),
                   d.expert_offsets};
  const auto* tiles = reinterpret_cast<const int4*>(map.tiles);
  gb::visit(bank.type, [&](auto trait) {
    using F = decltype(trait);
    if (ys.dtype == DType::kF32) {
      gemv_kernel<F, float><<<static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream>>>(a, n_slices, map.count, tiles);
    } else {
      gemv_kernel<F, bf16><<<static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream>>>(a, n_slices, map.count, tiles);
    }
  });
  K3_CUDA_CHECK_LAUNCH("moe_ggml gemv_kernel");
}

void moe_ggml_dequant_bf16(const MoeGgmlBank& bank, const MoeDispatch& d, const DeviceTensor& w, cudaStream_t stream) {
  moe_ggml_check_shape(bank.type, bank.experts, bank.n, bank.k, "moe_ggml_dequant_bf16");
  if (bank.data == nullptr) throw Error("moe_ggml_dequant_bf16: empty bank");
  if (bank.experts != d.experts) throw Error("moe_ggml_dequant_bf16: bank and dispatch differ in experts");
  expect_dtype(w, DType::kBF16, "moe_ggml_dequant_bf16 w");
  expect_shape(w, bank.rows(), bank.k, "moe_ggml_dequant_bf16 w");
  check_rows16(w, "moe_ggml_dequant_bf16 w");
  const int64_t chunks = bank.n * bank.k / 8;
  const dim3 grid(static_cast<unsigned>((chunks + kDequantThreads - 1) / kDequantThreads),
                  static_cast<unsigned>(bank.experts));
  gb::visit(bank.type, [&](auto trait) {
    dequant_kernel<decltype(trait)><<<grid, kDequantThreads, 0, stream>>>(
        bank.data, bank.row_bytes(), static_cast<int>(bank.n), static_cast<int>(bank.k), d.expert_offsets,
        static_cast<bf16*>(w.data), w.ld);
  });
  K3_CUDA_CHECK_LAUNCH("moe_ggml dequant_kernel");
}

void moe_grouped_gemm_ggml_dequant(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                                   const DeviceTensor& scratch, const DeviceTensor& ys, cudaStream_t stream,
                                   MoeTile tile) {
  moe_ggml_dequant_bf16(bank, d, scratch, stream);
  moe_grouped_gemm_bf16(xs, scratch, d, ys, stream, tile);
}

}  // namespace k3::cuda
