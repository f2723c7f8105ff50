// Integer dot-product kernels of GGML weight blocks (native layout, read in place) with int8
// activation blocks, one set per CPU tier (ggml_dot.cpp: portable reference + dispatch,
// ggml_dot_avx2.cpp, ggml_dot_avx512.cpp). Used by ggml_matrix.cpp only.
//
// Activations follow ggml's vec_dot_type idea: symmetric int8 codes with one float scale per 32
// values (Q8_0-like, for the 32-element formats) or per 256 (Q8_K-like, for the K-quants), plus
// Σ codes per 16 for the zero-point / min terms. The codes stay in natural order; everything a
// kernel needs beyond PreparedActivations is derived once per dot_rows call (TokenActs).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels/cpu_isa.h"
#include "io/ggml_types.h"

namespace k3::cpu::ggml {

// One token's activations as every kernel reads them. k = the row length.
struct TokenActs {
  const int8_t* q = nullptr;     // codes [k] in the kernel's CodeOrder
  const float* d = nullptr;      // scale per activation block [k / act_block]
  const int16_t* s16 = nullptr;  // Σ codes per 16 values [k / 16] (|Σ| ≤ 16·127, fits int16)
  const int16_t* s32 = nullptr;  // Σ codes per 32 values [k / 32]
  const float* dsum = nullptr;   // 32-element activation blocks: d · Σ codes per block [k / 32]
};

// Most tokens one kernel call handles; callers split larger groups.
inline constexpr int kMaxTokens = 4;

// y[t * ldy + r] = Σ_k W[r][k] · a_t[k] for r < rows, t < NT: `w` is the first row, rows are
// `row_bytes` apart, each `nblocks` weight blocks long. Each weight byte is read once for all NT
// tokens.
struct RowsArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t rows;
  int64_t nblocks;
  const TokenActs* acts;
  float* y;
  int64_t ldy;
};
using RowsFn = void (*)(const RowsArgs&);

// The order a kernel reads the activation codes in (TokenActs::q).
enum class CodeOrder {
  Natural,
  // 32-element nibble formats: per group of 4 blocks (128 codes), elements 0..15 of each block,
  // then elements 16..31 of each — the low and high nibbles of the 4 blocks' 16 bytes side by
  // side. Codes after the last whole group stay in natural order.
  NibbleQuads,
};
void to_code_order(CodeOrder order, const int8_t* x, int64_t k, int8_t* out);

struct Kernel {
  RowsFn by_tokens[kMaxTokens];  // [NT - 1]
  const char* tier;              // the tier whose code runs ("scalar", "avx2", "avx512")
  CodeOrder order = CodeOrder::Natural;
};

// Values per activation scale for `type` (32 or 256), 0 when it has no integer kernel.
int64_t act_block(GgmlType type);

// The integer kernel of `type` for `isa`: that tier's own kernel, else the best lower tier's;
// nullptr when `type` has no integer kernel.
const Kernel* find_kernel(GgmlType type, CpuIsa isa);

// Per tier: the kernels that tier specialises (nullptr for the others).
const Kernel* find_kernel_scalar(GgmlType type);
const Kernel* find_kernel_avx2(GgmlType type);
const Kernel* find_kernel_avx512(GgmlType type);

}  // namespace k3::cpu::ggml
