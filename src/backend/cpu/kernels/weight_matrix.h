// A weight matrix W [N, K] in the layout its CPU kernel reads, and the activation form that kernel
// consumes. Each scheme's CPU binding (cpu_format.h) makes its own WeightMatrix, in its format folder
// or from the shared kernels here; cpu_linear.cpp drives any of them the same way:
//   prepare(x)            once per forward(): x rounded / quantized into the kernel's form;
//   dot_rows(a, r0, r1)   fused decode + dot of rows [r0, r1) with every prepared token (few tokens);
//   decode_rows(r0, r1)   exact float32 of those rows (the scheme's dequant reference, row by row):
//                         used with prepared.values() by the many-token path and by the tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::cpu {

// What a kernel multiplies the weights with.
enum class ActivationForm {
  F32,           // x as given, or values a prepare changed (float-valued weights)
  Fixed16,       // 16-bit fixed point per block of `block` values: code = round(x · 2^s) with the
                 // largest s keeping |x|·2^s < 2^15, scale = 2^-s; error ≤ amax_block·2^-15, i.e. at
                 // least bf16's precision for every value within 2^-6 of its block's largest (the
                 // 4-bit E2M1 kernels: integer block dots, activations effectively 16-bit)
  Int8PerToken,  // int8, one scale per token (symmetric, or static with a zero point)
  Int8Blocks,    // symmetric int8 per block of `block` values (the block formats' integer activations)
};

// Activations of one forward() in the kernel's form. Only the members of that form are filled.
struct PreparedActivations {
  ActivationForm form = ActivationForm::F32;
  int64_t m = 0, k = 0;
  const float* f32 = nullptr;     // F32: the caller's x [m, k], or `owned`
  std::vector<float> owned;       // F32 values a prepare changed (an activation contract)
  std::vector<int16_t> q16;       // Fixed16: codes [m, k]
  std::vector<int8_t> q;          // Int8*: codes [m, k]
  std::vector<float> scale;       // Fixed16, Int8*: [m, k / block] (per token: block = k)
  std::vector<int32_t> sums;      // Int8*: Σ codes per 16 values [m, k / 16] (zero-point / min corrections)
  int64_t block = 0;              // Fixed16, Int8*: values per scale
  int32_t zero = 0;               // Int8*: the code of 0 (a static zero point); values are (code − zero) · scale

  // Token t as float32, exactly the values the fused kernel multiplies with (code · scale).
  void values(int64_t t, float* out) const;
};

void prepare_f32(const float* x, int64_t m, int64_t k, PreparedActivations& a);
// k % block == 0. A value too small for its block's fixed point becomes 0; an all-zero block has
// scale 0.
void prepare_fixed16(const float* x, int64_t m, int64_t k, int64_t block, PreparedActivations& a);
// Symmetric int8 per block: scale = amax / 127, code = round-half-even(x / scale) (all-zero block:
// scale 0, codes 0). block = k gives one scale per token. k % 16 == 0, k % block == 0.
void prepare_int8(const float* x, int64_t m, int64_t k, int64_t block, ActivationForm form, PreparedActivations& a);
// Static int8 with a zero point, form Int8PerToken with every token's scale `scale`:
// code = clamp(round-half-even(x / scale) + zero, -128, 127). k % 16 == 0.
void prepare_int8_static(const float* x, int64_t m, int64_t k, float scale, int32_t zero, PreparedActivations& a);

// Owns the mapping of weight bytes a WeightMatrix reads in place (null: the caller keeps them alive).
using KeepAlive = std::shared_ptr<const void>;

class WeightMatrix {
 public:
  virtual ~WeightMatrix() = default;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  virtual void prepare(const float* x, int64_t m, PreparedActivations& a) const = 0;
  // y[t * ldy + r] = Σ_k W[r][k] · a(t)[k] for t < a.m, r0 ≤ r < r1: every scale applied except
  // output_scale().
  virtual void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const = 0;
  // out[(r - r0) * K + k] = W[r][k] / output_scale(), exactly the scheme's reference up to that
  // last multiplication (float32).
  virtual void decode_rows(int64_t r0, int64_t r1, float* out) const = 0;
  // The per-tensor factor α applied to the accumulators after the dot (a format's global weight
  // scale, times its static activation scale under an activation contract; 1 where there is none).
  // Kept separate so the MoE can apply GEMM1's α before its activation exactly once
  // (quant-formats §3.4).
  virtual float output_scale() const { return 1.0f; }
  // Bytes of weight (and scales) one pass over the matrix reads.
  virtual uint64_t weight_bytes() const = 0;
  virtual std::string kernel_name() const = 0;
  CpuIsa isa() const { return isa_; }  // the tier its kernels were built for

 protected:
  WeightMatrix(int64_t rows, int64_t cols, CpuIsa isa) : rows_(rows), cols_(cols), isa_(isa) {}

 private:
  int64_t rows_, cols_;
  CpuIsa isa_;
};

}  // namespace k3::cpu
