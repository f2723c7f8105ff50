// AVX-512 tier of the FP4 row-group kernel (fp4_dot.h). Per 64-byte line: four vpermw lookups
// turn the 128 nibbles into four vectors of 16 rows × 2 k as int16 2·E2M1, and vpdpwssd (VNNI)
// multiplies each with the broadcast int16 pair of x — a lane is a row, so no horizontal sums.
// Per block the integer sums become float once and take (16 row scales × x block scale / 2) in one
// FMA per token: scales apply to block sums, never per element. (vdpbf16ps would avoid the
// fixed-point activations but issues at one per ~2.2 cycles on Sapphire/Emerald Rapids, vpdpwssd
// at ~1.3 per cycle.)
#include <immintrin.h>

#include "backend/cpu/kernels/fp4_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

__m512i twice_e2m1_table() {
  alignas(64) int16_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = static_cast<int16_t>(2.0f * kE2M1Values[i & 15]);  // index bit 4 ignored
  return _mm512_load_si512(t);
}

// The 16 row scales of one block as float32. E4M3 goes through F16 (value / 2^8; the caller
// multiplies the result by 2^8), E8M0 is placed in the float exponent (0 → 2^-127, a subnormal).
template <Fp4ScaleCode Code>
inline __m512 decode_scales(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (Code == Fp4ScaleCode::E4m3) {
    // Sign-extended byte << 7 with bit 14 (a sign copy) cleared is the F16 of e4m3 / 2^8.
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(w, _mm256_set1_epi16(static_cast<int16_t>(0xBFFF))));
  } else {
    const __m512i e = _mm512_cvtepu8_epi32(b);
    const __m512i bits = _mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23), _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                               _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(bits);
  }
}

// vpshufb control: in every 16-bit word, byte 1 moves to byte 0 and byte 1 becomes zero.
__m512i odd_bytes_down_control() {
  alignas(64) uint8_t c[64];
  for (int i = 0; i < 64; ++i) c[i] = i % 2 == 0 ? static_cast<uint8_t>((i % 16) + 1) : 0x80;
  return _mm512_load_si512(c);
}

// acc += pairwise int16 dot (VNNI). Inline asm: GCC 12 copies the accumulator around the
// intrinsic (the instruction is destructive), one extra move per dot.
inline void dpwssd(__m512i& acc, __m512i a, __m512i b) { asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b)); }

// Lines ahead to prefetch: at DRAM speed the hardware prefetcher alone leaves read bandwidth unused.
constexpr int64_t kPrefetchLines = 128;

template <Fp4ScaleCode Code, int NT>
void dot_groups(const Fp4Layout& w, const int16_t* xq, const float* xscale, int64_t r0, int64_t r1, float* y,
                int64_t ldy) {
  const __m512i table = twice_e2m1_table();
  const __m512i odd_bytes_down = odd_bytes_down_control();
  const int64_t lines = w.k / kFp4LineK, blocks = w.k / w.block, lines_per_block = w.block / kFp4LineK;
  // E4M3 scales are decoded as value / 2^8; weights are 2·E2M1.
  const float out_scale = Code == Fp4ScaleCode::E4m3 ? 128.0f : 0.5f;
  for (int64_t g = r0 / kFp4GroupRows; g * kFp4GroupRows < r1; ++g) {
    const uint8_t* codes = w.codes + g * lines * kFp4LineBytes;
    const uint8_t* scales = w.scales + g * blocks * kFp4GroupRows;
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      // Independent chains hide vpdpwssd's latency; the short blocks of E4M3-scaled weights (16
      // columns, 2 lines) need fewer, and every extra chain costs an add per block.
      constexpr int kChains = Code == Fp4ScaleCode::E4m3 ? 2 : 4;
      __m512i part[NT][kChains];
      for (int t = 0; t < NT; ++t) {
        for (int c = 0; c < kChains; ++c) part[t][c] = _mm512_setzero_si512();
      }
      for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; ++o) {
        _mm_prefetch(reinterpret_cast<const char*>(codes + (o + kPrefetchLines) * kFp4LineBytes), _MM_HINT_T0);
        const __m512i line = _mm512_loadu_si512(codes + o * kFp4LineBytes);
        // Nibble j of every word into bits 0..3 (vpermw ignores index bits above 4, the table repeats
        // at 16). Word byte 1 is brought down with a byte shuffle instead of a third shift, so the
        // shifts (port 0) and the shuffles (port 5) stay balanced.
        const __m512i high_byte = _mm512_shuffle_epi8(line, odd_bytes_down);
        const __m512i idx[4] = {line, _mm512_srli_epi16(line, 4), high_byte, _mm512_srli_epi16(high_byte, 4)};
        for (int j = 0; j < 4; ++j) {
          const __m512i wj = _mm512_permutexvar_epi16(idx[j], table);
          for (int t = 0; t < NT; ++t) {
            int32_t pair;
            __builtin_memcpy(&pair, xq + t * w.k + o * kFp4LineK + 2 * j, sizeof pair);
            dpwssd(part[t][j % kChains], wj, _mm512_set1_epi32(pair));
          }
        }
      }
      const __m512 s = decode_scales<Code>(scales + b * kFp4GroupRows);
      for (int t = 0; t < NT; ++t) {
        __m512i sum = part[t][0];
        for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, part[t][c]);
        const __m512 scale = _mm512_mul_ps(s, _mm512_set1_ps(xscale[t * blocks + b]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[t]);
      }
    }
    const int64_t base = g * kFp4GroupRows;
    uint32_t bits = 0;
    for (int i = 0; i < kFp4GroupRows; ++i) bits |= (base + i >= r0 && base + i < r1 ? 1u : 0u) << i;
    const __mmask16 mask = static_cast<__mmask16>(bits);
    for (int t = 0; t < NT; ++t) {
      _mm512_mask_storeu_ps(y + t * ldy + base, mask, _mm512_mul_ps(acc[t], _mm512_set1_ps(out_scale)));
    }
  }
}

template <Fp4ScaleCode Code>
void dot_rows(const Fp4Layout& w, const int16_t* xq, const float* xscale, int64_t m, int64_t r0, int64_t r1, float* y,
              int64_t ldy) {
  const int64_t blocks = w.k / w.block;
  for (int64_t t0 = 0; t0 < m; t0 += 4) {
    const int16_t* x = xq + t0 * w.k;
    const float* xs = xscale + t0 * blocks;
    float* yt = y + t0 * ldy;
    switch (std::min<int64_t>(4, m - t0)) {
      case 1: dot_groups<Code, 1>(w, x, xs, r0, r1, yt, ldy); break;
      case 2: dot_groups<Code, 2>(w, x, xs, r0, r1, yt, ldy); break;
      case 3: dot_groups<Code, 3>(w, x, xs, r0, r1, yt, ldy); break;
      default: dot_groups<Code, 4>(w, x, xs, r0, r1, yt, ldy); break;
    }
  }
}

void fp4_dot_rows_avx512(const Fp4Layout& w, const int16_t* xq, const float* xscale, int64_t m, int64_t r0, int64_t r1,
                         float* y, int64_t ldy) {
  if (w.scale_code == Fp4ScaleCode::E4m3) return dot_rows<Fp4ScaleCode::E4m3>(w, xq, xscale, m, r0, r1, y, ldy);
  dot_rows<Fp4ScaleCode::E8m0>(w, xq, xscale, m, r0, r1, y, ldy);
}

}  // namespace

Fp4DotRows fp4_dot_rows_avx512_tier() { return fp4_dot_rows_avx512; }

}  // namespace k3::cpu
