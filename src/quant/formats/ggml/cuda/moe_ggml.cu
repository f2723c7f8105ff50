// GGUF expert kernels (moe_ggml.h): bank geometry, activation quantisation (a template over the
// activation block) and the host side of the prefill GEMM (moe_ggml_mma_<type>.cu; the decode GEMV
// is in moe_ggml_gemv.cu).
#include "quant/formats/ggml/cuda/moe_ggml.h"

#include <algorithm>
#include <string>

#include "backend/cuda/ops/activation.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/core/launch.h"
#include "quant/formats/ggml/cuda/moe_ggml_blocks.h"
#include "quant/formats/ggml/cuda/moe_ggml_mma.h"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"
#include "backend/cuda/core/upload.h"

namespace k3::cuda {
namespace {

namespace gb = ggml_blocks;
using detail::bf16;

// ---- activation quantisation ------------------------------------------------------------------------

constexpr int kQuantThreads = 256;  // 8 values per thread: 2048 values per CTA, whole blocks of 32 or 256

// One thread per 8 values of one row; the BLOCK / 8 lanes of a block reduce its amax by shuffles.
// Src: the rows (kernel_util.cuh's RowsSource) or GEMM 1's output under the gated activation
// (activation.cuh's Activated). Launched as a programmatic dependent.
template <int BLOCK, class Src>
__global__ void __launch_bounds__(kQuantThreads) quantize_kernel(Src src, int k, MoeGgmlActs a) {
  constexpr int kLanes = BLOCK / 8;
  // The decode GEMV launched next (programmatic dependent launch) may start streaming its weights now;
  // it waits for this grid's completion before it reads the activations.
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int64_t row = blockIdx.x;
  const int col = (blockIdx.y * kQuantThreads + threadIdx.x) * 8;
  const bool valid = col < k;  // lanes past K take part in the shuffles with zeros
  float v[8] = {};
  if (valid) src.load8(row, col, v);
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

template <class Src>
void launch_quantize(const Src& src, const MoeGgmlActs& acts, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(acts.rows),
                  static_cast<unsigned>((acts.k + 8 * kQuantThreads - 1) / (8 * kQuantThreads)));
  const int k = static_cast<int>(acts.k);
  if (acts.block == 32) {
    launch_dependent(quantize_kernel<32, Src>, grid, dim3(kQuantThreads), 0, stream, src, k, acts);
  } else {
    launch_dependent(quantize_kernel<256, Src>, grid, dim3(kQuantThreads), 0, stream, src, k, acts);
  }
}

// ---- dequantisation to bf16 ----------------------------------------------------------------------------

constexpr int kDequantThreads = 256;  // 8 values per thread

// One thread per 8 values of one bank row: decode8's exact values rounded to bf16 (the prefill GEMM's
// weight tile values).
template <class F>
__global__ void __launch_bounds__(kDequantThreads)
    dequantize_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int k, bf16* __restrict__ out, int64_t ld) {
  const int64_t row = blockIdx.x;
  const int col = (blockIdx.y * kDequantThreads + threadIdx.x) * 8;
  if (col >= k) return;
  float v[8];
  F::decode8(w + row * row_bytes + static_cast<int64_t>(col / F::kBlock) * F::kBytes, col % F::kBlock, v);
  detail::store8(out + row * ld + col, v);
}

// The activations' checks both entries share (xs: the rows or gate); false when there is nothing to do.
bool check_acts(const DeviceTensor& xs, const MoeGgmlActs& acts, const char* what) {
  expect_shape(xs, acts.rows, acts.k, (std::string(what) + " input").c_str());
  if (acts.block != 32 && acts.block != 256) throw Error(std::string(what) + ": activation block must be 32 or 256");
  if (acts.k % acts.block != 0 || acts.k > INT32_MAX / 2) {
    throw Error(std::string(what) + ": K " + std::to_string(acts.k) + " is not a multiple of the block " +
                std::to_string(acts.block));
  }
  return acts.rows > 0;
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

void moe_ggml_check_bank(const MoeGgmlBank& bank, const MoeDispatch& d, const char* what) {
  moe_ggml_check_shape(bank.type, bank.experts, bank.n, bank.k, what);
  if (bank.data == nullptr) throw Error(std::string(what) + ": empty bank");
  if (bank.experts != d.experts) {
    throw Error(std::string(what) + ": bank has " + std::to_string(bank.experts) + " experts, dispatch " +
                std::to_string(d.experts));
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
  if (xs.dtype != DType::kBF16 && xs.dtype != DType::kF32) throw Error("moe_ggml_quantize: xs must be bf16 or f32");
  check_rows16(xs, "moe_ggml_quantize xs");
  if (!check_acts(xs, acts, "moe_ggml_quantize")) return;
  if (xs.dtype == DType::kBF16) {
    launch_quantize(detail::RowsSource<bf16>{xs.as<const bf16>(), xs.ld}, acts, stream);
  } else {
    launch_quantize(detail::RowsSource<float>{xs.as<const float>(), xs.ld}, acts, stream);
  }
}

void moe_ggml_quantize_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                  const MoeGgmlActs& acts, cudaStream_t stream) {
  check_gated_activation(act, gate, up, "moe_ggml_quantize_activation");
  expect_dtype(gate, DType::kBF16, "moe_ggml_quantize_activation gate");
  if (!check_acts(gate, acts, "moe_ggml_quantize_activation")) return;
  act::visit_activated(act, gate, up, [&](const auto& src) { launch_quantize(src, acts, stream); });
}

// Rows per expert from which the prefill GEMM's kM64 beats the decode GEMV, and its kM128 beats kM64,
// per type: H200, Kimi-K3 GEMM 1, measured at 18 / 37 / 73 rows per expert (1024 / 2048 / 4096 tokens,
// 2026-12-02, docs/performance.md). The GEMV's time and kM64's past 37 rows grow in proportion to the
// rows, kM128's is flat there: each switch is where the two lines cross (kM128 past 73 for Q3_K, Q4_K
// and Q5_K, whose kM64 was still ahead at 73).
struct GgmlTileSwitch {
  GgmlType type;
  double m64_from, m128_from;
};
constexpr GgmlTileSwitch kGgmlTileSwitches[] = {
    {GgmlType::Q2_K, 15, 63}, {GgmlType::Q3_K, 18, 80}, {GgmlType::Q4_0, 19, 64}, {GgmlType::Q4_K, 22, 78},
    {GgmlType::Q5_K, 24, 86}, {GgmlType::Q6_K, 14, 62}, {GgmlType::Q8_0, 12, 65},
};

MoeTile moe_ggml_tile_for(GgmlType type, int64_t rows, int64_t experts, int64_t n) {
  if (n % 8 != 0) return MoeTile::kM16;
  const double per_expert = static_cast<double>(rows) / static_cast<double>(std::max<int64_t>(1, experts));
  for (const GgmlTileSwitch& s : kGgmlTileSwitches) {
    if (s.type != type) continue;
    if (per_expert >= s.m128_from) return MoeTile::kM128;
    return per_expert >= s.m64_from ? MoeTile::kM64 : MoeTile::kM16;
  }
  return MoeTile::kM16;
}

void moe_grouped_gemm_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream, MoeTile tile) {
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  moe_ggml_check_bank(bank, d, "moe_grouped_gemm_ggml");
  expect_dtype(xs, DType::kBF16, "moe_grouped_gemm_ggml xs");
  expect_shape(xs, R, K, "moe_grouped_gemm_ggml xs");
  expect_shape(ys, R, N, "moe_grouped_gemm_ggml ys");
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) throw Error("moe_grouped_gemm_ggml: ys must be f32 or bf16");
  if (N % 8 != 0) throw Error("moe_grouped_gemm_ggml: needs N % 8 == 0, got " + shape_text(bank.type, bank.experts, N, K));
  check_rows16(xs, "moe_grouped_gemm_ggml xs");
  check_rows16(ys, "moe_grouped_gemm_ggml ys");
  if (tile == MoeTile::kAuto) {
    tile = moe_ggml_tile_for(bank.type, R, moe_choice_experts(d), N) == MoeTile::kM128 ? MoeTile::kM128 : MoeTile::kM64;
  }
  if (tile == MoeTile::kM16) {
    throw Error("moe_grouped_gemm_ggml: no kM16 tile (the decode class runs moe_grouped_gemv_ggml)");
  }
  const MoeTileMap map = moe_tile_map(d, tile);
  if (R == 0) return;
  const ggml_mma::Args a{xs.data, xs.ld, bank.data, bank.row_bytes(), ys.data, ys.ld, static_cast<int>(N),
                         static_cast<int>(K), d.expert_offsets, d.row_weight};
  const bool f32_out = ys.dtype == DType::kF32;
  gb::visit(bank.type, [&](auto trait) {
    ggml_mma::launch<decltype(trait)::kType>(tile, f32_out, a, map, stream);
  });
}

void moe_grouped_gemm_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream) {
  moe_grouped_gemm_ggml(xs, bank, d, ys, stream, MoeTile::kAuto);
}

void moe_ggml_dequantize_rows(const MoeGgmlBank& bank, int64_t row0, const DeviceTensor& out, cudaStream_t stream) {
  moe_ggml_check_shape(bank.type, bank.experts, bank.n, bank.k, "moe_ggml_dequantize_rows");
  expect_dtype(out, DType::kBF16, "moe_ggml_dequantize_rows out");
  if (out.cols != bank.k || row0 < 0 || row0 + out.rows > bank.rows()) {
    throw Error("moe_ggml_dequantize_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + out.rows) +
                ") of " + shape_text(bank.type, bank.experts, bank.n, bank.k) + " into " + out.describe());
  }
  check_rows16(out, "moe_ggml_dequantize_rows out");
  if (out.rows == 0) return;
  const auto col_blocks = static_cast<unsigned>((bank.k + 8 * kDequantThreads - 1) / (8 * kDequantThreads));
  const dim3 grid(static_cast<unsigned>(out.rows), col_blocks);
  const uint8_t* w = bank.data + row0 * bank.row_bytes();
  const int k = static_cast<int>(bank.k);
  gb::visit(bank.type, [&](auto trait) {
    dequantize_kernel<decltype(trait)><<<grid, kDequantThreads, 0, stream>>>(w, bank.row_bytes(), k, out.as<bf16>(), out.ld);
  });
  K3_CUDA_CHECK_LAUNCH("moe_ggml dequantize_kernel");
}

// The rows a chunk of moe_ggml_dense_gemm takes at the least (fewer would leave most SMs idle in its GEMM).
constexpr int64_t kDenseChunkMinRows = 256;

void moe_ggml_dense_gemm(Blas& blas, Arena& scratch, const DeviceTensor& xs, const MoeGgmlBank& bank,
                         const DeviceTensor& ys, cudaStream_t stream, size_t chunk_bytes) {
  moe_ggml_check_shape(bank.type, bank.experts, bank.n, bank.k, "moe_ggml_dense_gemm");
  if (bank.experts != 1 || bank.data == nullptr) {
    throw Error("moe_ggml_dense_gemm: needs a bank of one expert, got " +
                shape_text(bank.type, bank.experts, bank.n, bank.k));
  }
  expect_dtype(xs, DType::kBF16, "moe_ggml_dense_gemm xs");
  expect_shape(xs, xs.rows, bank.k, "moe_ggml_dense_gemm xs");
  expect_shape(ys, xs.rows, bank.n, "moe_ggml_dense_gemm ys");
  if (xs.rows == 0) return;
  const int64_t N = bank.n, K = bank.k;
  const int64_t fit = static_cast<int64_t>(chunk_bytes / static_cast<size_t>(2 * K)) / 8 * 8;
  const int64_t chunk = std::min(N, std::max(kDenseChunkMinRows, fit));
  const size_t mark = scratch.mark();
  const DeviceTensor w = scratch.alloc_tensor(DType::kBF16, chunk, K, "moe_ggml_dense_gemm weight chunk");
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = std::min(chunk, N - n0);
    const DeviceTensor wc = w.row_slice(0, nc);
    moe_ggml_dequantize_rows(bank, n0, wc, stream);
    blas.bf16(xs, wc, ys.col_slice(n0, nc), stream);
  }
  scratch.reset(mark);  // stream-ordered: later work on this stream runs after the GEMMs (arena.h)
}

bool moe_ggml_dense_gemm_for(const MoeGgmlBank& bank, const MoeDispatch& d) {
  return bank.experts == 1 && d.row_weight == nullptr && d.rows() >= kGgmlDenseGemmRows;
}

bool moe_ggml_prefill_gemm(const MoeGgmlBank& bank, const MoeDispatch& d) {
  return moe_ggml_tile_for(bank.type, d.rows(), moe_choice_experts(d), bank.n) != MoeTile::kM16;
}

}  // namespace k3::cuda
