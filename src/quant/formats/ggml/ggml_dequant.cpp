#include "quant/formats/ggml/ggml_dequant.h"

#include <omp.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace k3 {
namespace {

static_assert(std::endian::native == std::endian::little, "GGML blocks are little-endian");

// Private codecs; switch to core/numeric.h once it exists.

// IEEE half → float, exact. NaNs come out quiet (as x86's vcvtph2ps, which ggml uses, does).
// Written with masks instead of branches so that loops over it vectorize.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7FFFu;
  // zero or subnormal: mantissa * 2^-24 is exact in float
  const uint32_t small = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  // normal: rebias the exponent from 15 to 127; inf/NaN: exponent 31 -> 255 and NaNs made quiet
  const uint32_t special = 0u - static_cast<uint32_t>(magnitude >= 0x7C00u);
  const uint32_t quiet = static_cast<uint32_t>(magnitude > 0x7C00u) << 22;
  const uint32_t large = ((magnitude << 13) + (112u << 23) + (special & (112u << 23))) | quiet;
  const uint32_t is_small = 0u - static_cast<uint32_t>(magnitude < 0x0400u);
  return std::bit_cast<float>(sign | (small & is_small) | (large & ~is_small));
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Half of the E8M0 scale 2^(e-127), i.e. 2^(e-128); ggml's MXFP4 pairs it with doubled values.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// ---- 32-element blocks -------------------------------------------------------------------

// Q4_0, 18 bytes: f16 d; u8 qs[16]. Low nibbles are elements 0..15, high nibbles 16..31.
void block_q4_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
}

// Q4_1, 20 bytes: f16 d; f16 m; u8 qs[16].
void block_q4_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
}

// 5th bits of Q5_0/Q5_1: bit j of the little-endian u32 qh belongs to element j.
inline uint32_t load_qh32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// 16 when bit j of qh is set (a mask test vectorizes where a per-lane variable shift does not).
inline int fifth_bit(uint32_t qh, int j) { return (qh & (1u << j)) != 0 ? 16 : 0; }

// Q5_0, 22 bytes: f16 d; u8 qh[4]; u8 qs[16].
void block_q5_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const uint32_t qh = load_qh32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>((qs[j] & 0x0F) + fifth_bit(qh, j) - 16) * d;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>((qs[j] >> 4) + fifth_bit(qh, j + 16) - 16) * d;
}

// Q5_1, 24 bytes: f16 d; f16 m; u8 qh[4]; u8 qs[16].
void block_q5_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_qh32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) y[j] = static_cast<float>((qs[j] & 0x0F) + fifth_bit(qh, j)) * d + m;
  for (int j = 0; j < 16; ++j) y[j + 16] = static_cast<float>((qs[j] >> 4) + fifth_bit(qh, j + 16)) * d + m;
}

// Q8_0, 34 bytes: f16 d; i8 qs[32].
void block_q8_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// MXFP4, 17 bytes: u8 e (E8M0); u8 qs[16] of E2M1 codes, low nibbles first half. ggml multiplies
// the doubled E2M1 value (an integer) by half the scale; both factors and the product are exact
// to the same bits as a table of the 16 products.
void block_mxfp4(const uint8_t* __restrict b, float* __restrict y) {
  static constexpr int8_t kDoubledE2M1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const float d = e8m0_to_f32_half(b[0]);
  float value[16];
  for (int k = 0; k < 16; ++k) value[k] = static_cast<float>(kDoubledE2M1[k]) * d;
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) y[j] = value[qs[j] & 0x0F];
  for (int j = 0; j < 16; ++j) y[j + 16] = value[qs[j] >> 4];
}

// ---- 256-element K-quant super-blocks ----------------------------------------------------

// Q2_K, 84 bytes: u8 scales[16] (low nibble scale, high nibble min); u8 qs[64]; f16 d; f16 dmin.
// Element order: two halves of 128; in each, 4 bit-pairs × 2 sub-blocks of 16.
void block_q2_K(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b + 80);
  const float dmin = load_f16(b + 82);
  for (int g = 0; g < 16; ++g) {  // group of 16 outputs: half g/8, bit pair (g/2)%4, sub-block g%2
    const uint8_t* q = b + 16 + 32 * (g / 8) + 16 * (g % 2);
    const int shift = 2 * ((g / 2) % 4);
    const uint8_t sc = b[g];
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    for (int l = 0; l < 16; ++l) y[16 * g + l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
  }
}

// Q3_K, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 signed 6-bit scales); f16 d.
void block_q3_K(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* hmask = b;
  const uint8_t* packed = b + 96;
  const float d = load_f16(b + 108);
  int scale[16];
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? packed[j] & 0x0F : packed[j - 8] >> 4;
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scale[j] = (lo | hi << 4) - 32;
  }
  int is = 0;
  uint8_t m = 1;  // hmask bit b holds the high bit of elements 32b .. 32b+31
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b + 32 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
      for (int sub = 0; sub < 2; ++sub) {
        const float dl = d * static_cast<float>(scale[is++]);
        for (int l = 0; l < 16; ++l) {
          const int idx = 16 * sub + l;
          const int v = ((q[idx] >> shift) & 3) - ((hmask[idx] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// 6-bit scale and min j (0..7) of the 12 packed bytes shared by Q4_K and Q5_K.
inline void k4_scale_min(int j, const uint8_t* s, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4);
    mn = static_cast<uint8_t>((s[j + 4] >> 4) | (s[j] >> 6) << 4);
  }
}

// Q4_K, 144 bytes: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Four chunks of 64: low nibbles of
// qs[32c..32c+31] then their high nibbles.
void block_q4_K(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int c = 0; c < 4; ++c, q += 32) {
    uint8_t sc, mn;
    k4_scale_min(2 * c, scales, sc, mn);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    k4_scale_min(2 * c + 1, scales, sc, mn);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K, 176 bytes: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K; bit 2c of
// qh[l] is the 5th bit of the low-nibble element l of chunk c, bit 2c+1 of the high-nibble one.
void block_q5_K(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int c = 0; c < 4; ++c, q += 32) {
    uint8_t sc, mn;
    k4_scale_min(2 * c, scales, sc, mn);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    k4_scale_min(2 * c + 1, scales, sc, mn);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((q[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

// Q6_K, 210 bytes: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Two halves of 128 elements.
void block_q6_K(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_f16(b + 208);
  for (int half = 0; half < 2; ++half, y += 128) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    for (int g = 0; g < 8; ++g) {  // 16 outputs y[16g ..]: quarter g/2 of the 128, scale sc[g]
      const int quarter = g / 2, first = 16 * (g % 2);
      const uint8_t* low = ql + 32 * (quarter % 2);
      const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
      const float ds = d * static_cast<float>(sc[g % 2 + 2 * quarter]);
      for (int l = first; l < first + 16; ++l) {
        const int q = (((low[l] >> low_shift) & 0x0F) | ((qh[l] >> high_shift) & 3) << 4) - 32;
        y[32 * quarter + l] = ds * static_cast<float>(q);
      }
    }
  }
}

// ---- row kernels -------------------------------------------------------------------------

using RowFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);

template <void (*Block)(const uint8_t* __restrict, float* __restrict), int kElems, int kBytes>
void blocks(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) Block(src + i * kBytes, dst + i * kElems);
}

void row_f32(const uint8_t* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);  // an empty tensor may have null pointers
}

void row_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
}

#if defined(__x86_64__)
// vcvtph2ps: the conversion ggml itself uses on x86 (same bits as f16_to_f32, NaNs quieted).
__attribute__((target("avx,f16c"))) void row_f16_f16c(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  row_f16(src + 2 * i, dst + i, n - i);
}

// CPUID: AVX and F16C present and the OS saves the YMM registers.
bool cpu_has_avx_f16c() {
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((ecx & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 6u) == 6u;
}
#endif

RowFn best_row_f16() {
#if defined(__x86_64__)
  if (cpu_has_avx_f16c()) return row_f16_f16c;
#endif
  return row_f16;
}

void row_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}

RowFn row_fn(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return row_f32;
    case GgmlType::F16: {
      static const RowFn f16 = best_row_f16();
      return f16;
    }
    case GgmlType::BF16: return row_bf16;
    case GgmlType::Q4_0: return blocks<block_q4_0, 32, 18>;
    case GgmlType::Q4_1: return blocks<block_q4_1, 32, 20>;
    case GgmlType::Q5_0: return blocks<block_q5_0, 32, 22>;
    case GgmlType::Q5_1: return blocks<block_q5_1, 32, 24>;
    case GgmlType::Q8_0: return blocks<block_q8_0, 32, 34>;
    case GgmlType::Q2_K: return blocks<block_q2_K, 256, 84>;
    case GgmlType::Q3_K: return blocks<block_q3_K, 256, 110>;
    case GgmlType::Q4_K: return blocks<block_q4_K, 256, 144>;
    case GgmlType::Q5_K: return blocks<block_q5_K, 256, 176>;
    case GgmlType::Q6_K: return blocks<block_q6_K, 256, 210>;
    case GgmlType::MXFP4: return blocks<block_mxfp4, 32, 17>;
    default: return nullptr;
  }
}

// Validates (type, n) and returns the row kernel and the number of blocks.
RowFn checked_row_fn(GgmlType type, int64_t n, int64_t& n_blocks) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  RowFn fn = row_fn(type);
  if (fn == nullptr) throw Error("no dequantizer for GGML type " + std::string(info.name));
  if (n < 0 || n % info.block_size != 0) {
    throw Error("cannot dequantize " + std::to_string(n) + " elements of " + std::string(info.name) +
                ": not a whole number of " + std::to_string(info.block_size) + "-element blocks");
  }
  n_blocks = n / info.block_size;
  return fn;
}

}  // namespace

bool ggml_has_dequant(GgmlType type) { return row_fn(type) != nullptr; }

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  int64_t n_blocks = 0;
  RowFn fn = checked_row_fn(type, n, n_blocks);
  fn(src, dst, n_blocks);
}

void dequantize_tensor(GgmlType type, std::span<const uint8_t> src, float* dst, int64_t n, int n_threads) {
  int64_t n_blocks = 0;
  RowFn fn = checked_row_fn(type, n, n_blocks);
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (src.size() / info.type_size != static_cast<uint64_t>(n_blocks) || src.size() % info.type_size != 0) {
    throw Error("cannot dequantize " + std::to_string(n) + " elements of " + std::string(info.name) + " from " +
                std::to_string(src.size()) + " bytes (needs " + std::to_string(n_blocks * info.type_size) + ")");
  }
  // Chunks of about 16 Ki output floats keep scheduling cheap and the stores streaming.
  const int64_t chunk = std::max<int64_t>(1, 16384 / info.block_size);
  const int64_t n_chunks = (n_blocks + chunk - 1) / chunk;
  const uint8_t* base = src.data();
  const int threads = n_threads > 0 ? n_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t first = c * chunk;
    const int64_t count = std::min(chunk, n_blocks - first);
    fn(base + first * info.type_size, dst + first * info.block_size, count);
  }
}

}  // namespace k3
