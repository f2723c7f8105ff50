// FP8-block routed experts (moe_fp8_block.h): the bank, its upload and the grouped GEMM of
// moe_grouped_gemm.cuh over a weight source that decodes e4m3 blocks to bf16 in shared memory.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/moe/moe_grouped_gemm.cuh"
#include "core/error.h"
#include "quant/formats/fp8/cuda/moe_fp8_block.h"
#include "quant/formats/fp8/cuda/moe_fp8_block_internal.h"

namespace k3::cuda {
namespace {

using namespace grouped_gemm;

// Four e4m3 codes (a little-endian word) as floats, exactly (e4m3 ⊂ f16).
__device__ __forceinline__ void e4m3x4_to_float(uint32_t q, float* out) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(q & 0xFFFFu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(q >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}

// Weight source of moe_gemm_kernel: bank rows of e4m3 codes, K apart, and their 128×128 multipliers.
struct Fp8BlockSource {
  static constexpr bool kAsync = false;  // decoded by the threads (plain shared stores)
  const uint8_t* codes;
  const float* scales;
  int64_t k, scale_ld;

  // Bank row `row` (and the rows kRowStep, 2·kRowStep, … after it where `rows` has their bit),
  // elements col … col + 7 (one 128-column block: col % 8 == 0), as bf16(code · multiplier) into dst;
  // zeros where !in_k or a row is missing.
  template <class C>
  __device__ __forceinline__ void load(bf16* dst, int64_t row, int col, bool in_k, uint32_t rows) const {
#pragma unroll
    for (int i = 0; i < C::BN / C::kRowStep; ++i) {
      float v[8] = {};
      if (in_k && (rows >> i & 1u)) {
        const int64_t r = row + i * C::kRowStep;
        const uint2 q = *reinterpret_cast<const uint2*>(codes + r * k + col);
        const float m = scales[r / kFp8ExpertBlock * scale_ld + col / kFp8ExpertBlock];
        e4m3x4_to_float(q.x, v);
        e4m3x4_to_float(q.y, v + 4);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] *= m;  // the f32 product the host's dequantisation forms
      }
      detail::store8(dst + i * C::kRowStep * C::LDS, v);
    }
  }

  // The cache lines load() will read for the same rows and `col` into L1, a stage ahead of the decode.
  template <class C>
  __device__ __forceinline__ void prefetch(int64_t row, int col, bool in_k, uint32_t rows) const {
#pragma unroll
    for (int i = 0; i < C::BN / C::kRowStep; ++i) {
      if (in_k && (rows >> i & 1u)) {
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(codes + (row + i * C::kRowStep) * k + col));
      }
    }
  }
};

std::string shape_text(int64_t experts, int64_t n, int64_t k) {
  return std::to_string(experts) + " experts × [" + std::to_string(n) + ", " + std::to_string(k) + "]";
}

}  // namespace

void moe_fp8_block_check_shape(int64_t experts, int64_t n, int64_t k, const char* what) {
  if (experts <= 0 || n <= 0 || k <= 0 || n % kFp8ExpertBlock != 0 || k % 8 != 0 || n > INT32_MAX / 2 || k > INT32_MAX / 2) {
    throw Error(std::string(what) + ": an FP8-block expert bank needs N % 128 == 0 and K % 8 == 0, got " +
                shape_text(experts, n, k));
  }
}

MoeFp8BlockBank moe_fp8_block_alloc(Arena& arena, int64_t experts, int64_t n, int64_t k, const char* what) {
  moe_fp8_block_check_shape(experts, n, k, what);
  MoeFp8BlockBank b;
  b.experts = experts, b.n = n, b.k = k;
  b.codes = static_cast<uint8_t*>(arena.alloc(b.code_bytes(), what));
  b.scales = static_cast<float*>(arena.alloc(b.scale_bytes(), what));
  return b;
}

void moe_fp8_block_upload_rows(const MoeFp8BlockBank& bank, int64_t row0, const uint8_t* codes, const float* scales,
                               int64_t rows) {
  if (row0 < 0 || rows < 0 || row0 + rows > bank.rows() || row0 % kFp8ExpertBlock != 0 || rows % kFp8ExpertBlock != 0) {
    throw Error("moe_fp8_block_upload_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) +
                ") are not whole 128-row blocks of the bank's " + std::to_string(bank.rows()));
  }
  copy_bytes_to_device(bank.codes + row0 * bank.k, codes, static_cast<size_t>(rows * bank.k));
  copy_bytes_to_device(bank.scales + row0 / kFp8ExpertBlock * bank.scale_cols(), scales,
                       static_cast<size_t>(rows / kFp8ExpertBlock * bank.scale_cols()) * sizeof(float));
}

void moe_grouped_gemm_fp8_block(const DeviceTensor& xs, const MoeFp8BlockBank& bank, const MoeDispatch& d,
                                const DeviceTensor& ys, cudaStream_t stream, MoeTile tile, Fp8ExpertKernel kernel) {
  constexpr const char* kFn = "moe_grouped_gemm_fp8_block";
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  moe_fp8_block_check_shape(bank.experts, N, K, kFn);
  if (bank.codes == nullptr || bank.scales == nullptr) throw Error(std::string(kFn) + ": empty bank");
  if (bank.experts != d.experts) {
    throw Error(std::string(kFn) + ": bank has " + std::to_string(bank.experts) + " experts, dispatch " +
                std::to_string(d.experts));
  }
  expect_dtype(xs, DType::kBF16, "moe_grouped_gemm_fp8_block xs");
  expect_shape(xs, R, K, "moe_grouped_gemm_fp8_block xs");
  expect_shape(ys, R, N, "moe_grouped_gemm_fp8_block ys");
  for (const DeviceTensor* t : {&xs, &ys}) {
    if (!rows_aligned16(*t)) throw Error(std::string(kFn) + ": needs 16-byte aligned rows, got " + t->describe());
  }
  if (tile == MoeTile::kAuto) tile = moe_tile_for(R, moe_choice_experts(d));
  const bool decode_fits = tile == MoeTile::kM16 && fp8_experts::decode_fits(N, K);
  if (kernel == Fp8ExpertKernel::kAuto) kernel = decode_fits ? Fp8ExpertKernel::kDecode : Fp8ExpertKernel::kTile;
  if (kernel == Fp8ExpertKernel::kDecode && !decode_fits) {
    throw Error(std::string(kFn) + ": the decode kernel needs the kM16 tile and K % 16 == 0, got tile height " +
                std::to_string(moe_tile_rows(tile)) + ", " + shape_text(bank.experts, N, K));
  }
  const MoeTileMap map = moe_tile_map(d, tile);
  if (R == 0) return;
  if (kernel == Fp8ExpertKernel::kDecode) {
    const fp8_experts::DecodeArgs a{xs.data, xs.ld, bank.codes, bank.scales, bank.scale_cols(), ys.data, ys.ld,
                                    static_cast<int>(N), static_cast<int>(K), 0, d.expert_offsets, nullptr, nullptr,
                                    d.row_weight};
    if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) {
      throw Error(std::string(kFn) + ": ys must be f32 or bf16, got " + ys.describe());
    }
    fp8_experts::launch_decode(a, map, ys.dtype == DType::kF32, stream);
    return;
  }
  const GemmArgs<Fp8BlockSource> a{xs.as<const bf16>(), xs.ld, {bank.codes, bank.scales, K, bank.scale_cols()}, ys.data,
                                   ys.ld, static_cast<int>(N), static_cast<int>(K), 0, d.expert_offsets, nullptr,
                                   nullptr, d.row_weight};
  launch_tile(tile, a, map, ys, stream, kFn);
}

}  // namespace k3::cuda
