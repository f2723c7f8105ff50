// AVX-512 tier of the integer row-group kernel (int8_dot.h). Per 64-byte line, vpdpbusd (VNNI)
// multiplies 16 rows × 4 k of u8 weights with the broadcast 4 s8 activation codes — a lane is a
// row, so no horizontal sums; int4 lines are split into two u8 vectors with one and each (low
// nibbles, and high nibbles left as 16·u: their sums are shifted right by 4 once per block, exact),
// no lookup table. Each block's int32 sums lose offset·Σc (and the zero point's row term) exactly,
// become float once per block and take the 16 row scales in one FMA; the token scale is applied
// once at the end. Int4 streams are prefetched kPrefetchLines ahead (at DRAM speed the hardware
// prefetcher alone left ~15% of the read bandwidth unused here).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant/formats/modelslim/cpu/int8_dot.h"

namespace k3::cpu {
namespace {

constexpr int64_t kPrefetchLines = 32;

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// acc += Σ4 u8 · s8 per lane, in place: GCC 12 copies the accumulator around the intrinsic (one
// extra vector move per vpdpbusd, which made the int4 loop move-bound).
inline void dpbusd(__m512i& acc, __m512i u8, __m512i s8) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8)); }

// G row groups × NT tokens at once. Four independent sum chains per (group, token) hide
// vpdpbusd's latency: int4 two lines × (low, high), int8 four lines.
template <bool Int4, int NT, int G>
void dot_groups(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale, int64_t g0,
                int64_t r0, int64_t r1, float* y, int64_t ldy) {
  constexpr int64_t lk = Int4 ? 8 : 4, step = Int4 ? 2 : 4;
  const int64_t lines = w.k / lk, blocks = w.k / w.block, lines_per_block = w.block / lk;
  const __m512i low_mask = _mm512_set1_epi8(0x0F), high_mask = _mm512_set1_epi8(static_cast<char>(0xF0));
  const uint8_t* codes[G];
  __m512i offsets[G];
  __m512 acc[G][NT];
  for (int gi = 0; gi < G; ++gi) {
    codes[gi] = w.codes + (g0 + gi) * lines * kInt8LineBytes;
    offsets[gi] = _mm512_loadu_si512(w.offsets + (g0 + gi) * kInt8GroupRows);
    for (int t = 0; t < NT; ++t) acc[gi][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i part[G][NT][4];
    for (int gi = 0; gi < G; ++gi) {
      for (int t = 0; t < NT; ++t) part[gi][t][0] = part[gi][t][1] = part[gi][t][2] = part[gi][t][3] = _mm512_setzero_si512();
    }
    for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; o += step) {
      if constexpr (Int4) {
        for (int u = 0; u < 2; ++u) {
          __m512i lo[G], hi[G];
          for (int gi = 0; gi < G; ++gi) {
            _mm_prefetch(reinterpret_cast<const char*>(codes[gi] + (o + u + kPrefetchLines) * kInt8LineBytes), _MM_HINT_T0);
            const __m512i line = _mm512_loadu_si512(codes[gi] + (o + u) * kInt8LineBytes);
            lo[gi] = _mm512_and_si512(line, low_mask);
            hi[gi] = _mm512_and_si512(line, high_mask);  // 16 · high nibble: no shift per line
          }
          for (int t = 0; t < NT; ++t) {
            const int8_t* x = xq + t * w.k + (o + u) * 8;
            const __m512i xl = broadcast4(x), xh = broadcast4(x + 4);
            for (int gi = 0; gi < G; ++gi) {
              dpbusd(part[gi][t][2 * u], lo[gi], xl);
              dpbusd(part[gi][t][2 * u + 1], hi[gi], xh);
            }
          }
        }
      } else {
        for (int u = 0; u < 4; ++u) {
          __m512i line[G];
          for (int gi = 0; gi < G; ++gi) line[gi] = _mm512_loadu_si512(codes[gi] + (o + u) * kInt8LineBytes);
          for (int t = 0; t < NT; ++t) {
            const __m512i xb = broadcast4(xq + t * w.k + (o + u) * 4);
            for (int gi = 0; gi < G; ++gi) dpbusd(part[gi][t][u], line[gi], xb);
          }
        }
      }
    }
    const int64_t sb = b * w.scale_blocks / blocks;
    for (int t = 0; t < NT; ++t) {
      const int32_t* s16 = xsums16 + t * (w.k / 16) + b * (w.block / 16);
      int32_t xsum = 0;
      for (int64_t j = 0; j < w.block / 16; ++j) xsum += s16[j];
      for (int gi = 0; gi < G; ++gi) {
        // Σ (c − z)(q − off) = Σ c·u − offset·Σc − row term. int4: chains 1 and 3 hold 16 · Σ high·c
        // (exact; the block bound keeps it in int32).
        const __m512i correction = Int4 ? _mm512_set1_epi32(8 * xsum) : _mm512_mullo_epi32(offsets[gi], _mm512_set1_epi32(xsum));
        const __m512i odd = _mm512_add_epi32(part[gi][t][1], part[gi][t][3]);
        __m512i sum = _mm512_add_epi32(_mm512_sub_epi32(part[gi][t][0], correction),
                                       _mm512_add_epi32(part[gi][t][2], Int4 ? _mm512_srai_epi32(odd, 4) : odd));
        if (w.row_terms != nullptr) {
          sum = _mm512_sub_epi32(sum, _mm512_loadu_si512(w.row_terms + ((g0 + gi) * blocks + b) * kInt8GroupRows));
        }
        const __m512 scale = _mm512_loadu_ps(w.scales + ((g0 + gi) * w.scale_blocks + sb) * kInt8GroupRows);
        acc[gi][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[gi][t]);
      }
    }
  }
  for (int gi = 0; gi < G; ++gi) {
    const int64_t base = (g0 + gi) * kInt8GroupRows;
    uint32_t bits = 0;
    for (int i = 0; i < kInt8GroupRows; ++i) bits |= (base + i >= r0 && base + i < r1 ? 1u : 0u) << i;
    for (int t = 0; t < NT; ++t) {
      _mm512_mask_storeu_ps(y + t * ldy + base, static_cast<__mmask16>(bits),
                            _mm512_mul_ps(acc[gi][t], _mm512_set1_ps(xscale[t])));
    }
  }
}

// Row groups two at a time for one or two tokens (the activation broadcasts serve both), one at a
// time for more (registers).
template <bool Int4, int NT>
void dot_tokens(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale, int64_t r0,
                int64_t r1, float* y, int64_t ldy) {
  constexpr int G = NT == 1 ? 4 : NT <= 2 ? 2 : 1;
  const int64_t g_end = (r1 + kInt8GroupRows - 1) / kInt8GroupRows;
  int64_t g = r0 / kInt8GroupRows;
  for (; g + G <= g_end; g += G) dot_groups<Int4, NT, G>(w, xq, xsums16, xscale, g, r0, r1, y, ldy);
  for (; g < g_end; ++g) dot_groups<Int4, NT, 1>(w, xq, xsums16, xscale, g, r0, r1, y, ldy);
}

template <bool Int4>
void dot_rows(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale, int64_t m, int64_t r0,
              int64_t r1, float* y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < m; t0 += 4) {
    const int8_t* x = xq + t0 * w.k;
    const int32_t* s = xsums16 + t0 * (w.k / 16);
    const float* xs = xscale + t0;
    float* yt = y + t0 * ldy;
    switch (std::min<int64_t>(4, m - t0)) {
      case 1: dot_tokens<Int4, 1>(w, x, s, xs, r0, r1, yt, ldy); break;
      case 2: dot_tokens<Int4, 2>(w, x, s, xs, r0, r1, yt, ldy); break;
      case 3: dot_tokens<Int4, 3>(w, x, s, xs, r0, r1, yt, ldy); break;
      default: dot_tokens<Int4, 4>(w, x, s, xs, r0, r1, yt, ldy); break;
    }
  }
}

void int8_dot_rows_avx512(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale, int64_t m,
                          int64_t r0, int64_t r1, float* y, int64_t ldy) {
  if (w.int4) return dot_rows<true>(w, xq, xsums16, xscale, m, r0, r1, y, ldy);
  dot_rows<false>(w, xq, xsums16, xscale, m, r0, r1, y, ldy);
}

}  // namespace

Int8DotRows int8_dot_rows_avx512_tier() { return int8_dot_rows_avx512; }

}  // namespace k3::cpu
