// GEMMs of the CUDA backend, through cuBLASLt (and our small-M bf16 kernel), all y[M,N] = x[M,K] · W[N,K]ᵀ with W row-major as
// checkpoints store it and bf16 output (f32 output too for bf16 inputs):
//   bf16        bf16 x, bf16 W
//   fp8_tensor  e4m3 x and W with one fp32 dequant multiplier each (ModelOpt FP8)
//   fp8_block   e4m3 x with 1×128 multipliers (VEC128_32F) and W with 128×128 multipliers
//               (BLK128x128_32F): FP8_PB_WO / DeepSeek `weight_scale_inv` / compressed-tensors
//               FP8-block
// linear_fp8_pb_wo / linear_fp8_tensor put our activation quantisation in front.
//
// Mapping onto cuBLASLt's column-major world: yᵀ[N,M] = op_T(W as col-major [K,N]) · (xᵀ as col-major
// [K,M]), i.e. the TN layout that Hopper's FP8 kernels require, m = N, n = M, k = K.
//
// A Blas owns one cuBLASLt handle, a workspace taken from the arena, and a cache of plans (matmul
// descriptor, layouts and the heuristic's algorithm) keyed by kind, shape, leading dimensions and
// pointer alignment, so the heuristic runs once per shape. Not thread-safe: one Blas per stream
// user. cublasLtMatmul with a caller-provided workspace is capturable in CUDA graphs.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// FP8 block-scaled weight on the device: e4m3 codes [N, K] and the 128×128 dequant multipliers in
// the layout cuBLASLt's BLK128x128_32F reads for the transposed A operand: K-blocks contiguous,
// scales[nb · scale_ld + kb] with scale_ld = round_up(cdiv(K,128), 4) (the padding is zero).
struct Fp8BlockWeight {
  DeviceTensor codes;
  float* scales = nullptr;
  int64_t scale_ld = 0;
};
int64_t fp8_block_scale_ld(int64_t k);
// From a checkpoint's codes and its row-major [cdiv(N,128), cdiv(K,128)] fp32 multipliers (the
// layout of quant/formats/fp8's dequant_fp8_block; ModelOpt's 4-D [N/128,1,K/128,1] is the same bytes).
Fp8BlockWeight upload_fp8_block_weight(Arena& arena, const uint8_t* codes, const float* scales, int64_t n, int64_t k,
                                       const char* what);

// FP8 per-tensor weight: e4m3 codes [N, K] and one fp32 dequant multiplier on the device.
struct Fp8TensorWeight {
  DeviceTensor codes;
  float* scale = nullptr;
};
Fp8TensorWeight upload_fp8_tensor_weight(Arena& arena, const uint8_t* codes, float scale, int64_t n, int64_t k,
                                         const char* what);

// Activation scale tensor size of quantize_fp8_1x128 for [M, K] codes.
inline int64_t fp8_1x128_scale_count(int64_t m, int64_t k) { return (k + 127) / 128 * m; }

// cuBLASLt 13.0 on the H200 has block-scaled (VEC128 × BLK128x128) kernels only when M, its n, is a
// multiple of 8: measured M = 1, 3, 5, 129 refused (CUBLAS_STATUS_NOT_SUPPORTED), 8, 64, 200, 1024
// accepted. The FP8_PB_WO path pads the activation rows to this (zero codes, scale 1).
inline constexpr int64_t kFp8BlockRowAlign = 8;
inline int64_t fp8_block_padded_rows(int64_t m) { return (m + kFp8BlockRowAlign - 1) / kFp8BlockRowAlign * kFp8BlockRowAlign; }

// Small-M bf16 GEMM, our kernel (gemv_bf16.cu): y[M,N] = x[M,K] · W[N,K]ᵀ for 1 ≤ M ≤ kGemvMaxRows,
// x and W bf16 (K % 8 == 0, 16-byte aligned rows), y bf16 or f32, fp32 accumulation. At decode a
// GEMM is a stream over W; this reads each weight byte once with many loads in flight, where
// cuBLASLt's small-M kernels stay latency-bound on the smaller projections.
inline constexpr int64_t kGemvMaxRows = 8;
// The model's bf16 linears take gemv_bf16 up to this many rows and cuBLASLt above: on the H200 the
// kernel leads at M = 1 (2.3 vs 1.8 TB/s on 4096×2304; behind only on K3's o_proj), at M = 2 it still
// leads on the Kimi-Linear shapes and K3's q_b but not on K3's 7168-wide ones, and from M = 4 it falls
// behind everywhere, the x loads from L1 competing with the weight stream.
inline constexpr int64_t kGemvModelRows = 2;
void gemv_bf16(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream);

class Blas {
 public:
  static constexpr size_t kDefaultWorkspace = size_t{32} << 20;  // cuBLAS's advice for Hopper

  explicit Blas(Arena& arena, size_t workspace_bytes = kDefaultWorkspace);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // x: bf16 [M, K]; w: bf16 [N, K]; y: bf16 or f32 [M, N] (f32: router logits, lm_head).
  void bf16(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream);
  // xq: e4m3 [M, K] with the device scalar x_scale; y = x_scale · w.scale · xq · codesᵀ.
  void fp8_tensor(const DeviceTensor& xq, const float* x_scale, const Fp8TensorWeight& w, const DeviceTensor& y,
                  cudaStream_t stream);
  // xq: e4m3 [M, K] with x_scales in quantize_fp8_1x128's layout (scales[kb·M + m]); M must be a
  // multiple of kFp8BlockRowAlign.
  void fp8_block(const DeviceTensor& xq, const float* x_scales, const Fp8BlockWeight& w, const DeviceTensor& y,
                 cudaStream_t stream);

  size_t plan_count() const { return plans_.size(); }

  enum class Kind : uint8_t { kBf16, kFp8Tensor, kFp8Block };
  struct Plan;

 private:
  // kind, output dtype, M, N, K, ldx, ldw, ldy, alignment of x, w, y (bytes, capped at 256)
  using Key = std::tuple<Kind, DType, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t>;
  void run(Kind kind, const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, const float* x_scale,
           const float* w_scale, cudaStream_t stream);
  Plan& plan(const Key& key, const float* x_scale, const float* w_scale);

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

// FP8_PB_WO linear: x (bf16 or f32 [M, K]) is quantised per token 1×128 into arena scratch
// (taken and given back inside: stream-ordered reuse, see arena.h), then fp8_block. y: bf16 [M, N],
// or [fp8_block_padded_rows(M), N] (the rows past M are then scratch): the GEMM writes straight
// into a padded y, while an unpadded y with M not a multiple of 8 costs a scratch output and a copy.
void linear_fp8_pb_wo(Blas& blas, Arena& scratch, const DeviceTensor& x, const Fp8BlockWeight& w, const DeviceTensor& y,
                      cudaStream_t stream);
// FP8 per-tensor linear with a static input scale (device scalar; ModelOpt input_scale).
void linear_fp8_tensor(Blas& blas, Arena& scratch, const DeviceTensor& x, const float* input_scale,
                       const Fp8TensorWeight& w, const DeviceTensor& y, cudaStream_t stream);

}  // namespace k3::cuda
