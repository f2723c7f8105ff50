// Helpers shared by the GGML dot kernels of every tier (ggml_dot*.cpp): block geometry, scalar
// decoding of the per-block scale fields, and the row loop. Included by each tier's translation
// unit, so the code here is compiled with that tier's flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/formats/ggml/cpu/ggml_dot.h"
#include "core/numeric.h"
#if defined(__F16C__)
#include <immintrin.h>
#endif

// Defines `const Kernel* NAME(GgmlType)` over a tier's kernels kQ4_0 … kQ6_K (each tier names them
// alike), so the type → kernel table is written once.
#define K3_GGML_KERNEL_TABLE(NAME)                      \
  const Kernel* NAME(GgmlType type) {                   \
    switch (type) {                                     \
      case GgmlType::Q4_0: return &kQ4_0;               \
      case GgmlType::Q4_1: return &kQ4_1;               \
      case GgmlType::Q5_0: return &kQ5_0;               \
      case GgmlType::Q5_1: return &kQ5_1;               \
      case GgmlType::Q8_0: return &kQ8_0;               \
      case GgmlType::MXFP4: return &kMxfp4;             \
      case GgmlType::Q2_K: return &kQ2_K;               \
      case GgmlType::Q3_K: return &kQ3_K;               \
      case GgmlType::Q4_K: return &kQ4_K;               \
      case GgmlType::Q5_K: return &kQ5_K;               \
      case GgmlType::Q6_K: return &kQ6_K;               \
      default: return nullptr;                          \
    }                                                   \
  }

namespace k3::cpu::ggml {

// Bytes per block (ggml's type_size) of the formats with integer kernels.
inline constexpr size_t kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24, kQ8_0Bytes = 34,
                        kMxfp4Bytes = 17, kQ2_KBytes = 84, kQ3_KBytes = 110, kQ4_KBytes = 144, kQ5_KBytes = 176,
                        kQ6_KBytes = 210;

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// IEEE half at p → float (exact).
inline float load_f16(const uint8_t* p) {
#if defined(__F16C__)
  return _cvtsh_ss(load_u16(p));
#else
  return decode_f16(load_u16(p));
#endif
}

// MXFP4's E8M0 byte as ggml applies it: half the scale, 2^(e-128), paired with doubled E2M1
// values (integers), see block_mxfp4 in quant/formats/ggml/ggml_dequant.cpp.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Q4_K / Q5_K: the 8 six-bit scales and mins packed in 12 bytes.
inline void unpack_k4_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0x0F) | (s[j] >> 6) << 4);
    mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
  }
}

// Q3_K: the 16 signed six-bit scales (stored biased by 32) packed in 12 bytes.
inline void unpack_q3_scales(const uint8_t* s, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? s[j] & 0x0F : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | hi << 4) - 32);
  }
}

// Software prefetch of the weight stream. A GEMV reads each weight byte once, and the kernels
// consume it too slowly for the out-of-order window and the hardware prefetchers alone to keep
// enough misses in flight (measured 2× slower without). Two distances: every line is requested
// into L2 kPrefetchFar bytes ahead (prefetcht1: no L1 fill buffer held for the DRAM latency) and
// into L1 kPrefetchNear bytes ahead (then an L2 hit); measured on a 2-core Emerald Rapids VM,
// single thread vs a streaming read: L1-only at 4 KiB 78-80 %, near 2 KiB + far 16 KiB 86-88 %
// (Q4_0, Q4_K). Each call covers `kBytes` at hits ≤ 64 bytes apart, so every line of the
// contiguous rows is requested once. Reads past the matrix are harmless (prefetches do not fault).
inline constexpr int64_t kPrefetchNear = 2048, kPrefetchFar = 16384;
template <size_t kBytes>
inline void prefetch_stream(const uint8_t* p) {
  for (size_t off = 0; off < kBytes; off += 64) {
    __builtin_prefetch(p + kPrefetchFar + off, 0, 2);
    __builtin_prefetch(p + kPrefetchNear + off, 0, 3);
  }
}

// The row loop every kernel shares: `row(w, acc)` accumulates one row's NT dot products.
template <int NT, class RowBody>
inline void for_each_row(const RowsArgs& r, RowBody row) {
  for (int64_t i = 0; i < r.rows; ++i) {
    float acc[NT];
    row(r.w + i * r.row_bytes, acc);
    for (int t = 0; t < NT; ++t) r.y[t * r.ldy + i] = acc[t];
  }
}

// Loops over tokens, chunks and halves are short and constant: unrolled, their accumulator
// arrays live in registers (a runtime index would put them on the stack, behind store
// forwarding on every accumulation).
#define K3_UNROLL _Pragma("GCC unroll 16")
#define K3_ALWAYS_INLINE inline __attribute__((always_inline))

// Kernel{fn<1>, ..., fn<kMaxTokens>} for a function template fn<NT>(const RowsArgs&).
#define K3_GGML_KERNEL(fn, tier) \
  Kernel { {fn<1>, fn<2>, fn<3>, fn<4>}, tier }

}  // namespace k3::cpu::ggml
