// AVX-512 tier of gemm_rows_f32 (tile_gemm.h): register blocks of 4 rows × 6 tokens, 24
// accumulators of 16 lanes each, one FMA per row, token and 16 columns; every output is a 16-lane
// partial sum over k, summed across its lanes once at the end. Tokens are the outer loop, so a
// block's 6 activation rows stay in cache while the tile's rows pass over them. An output's
// operations do not depend on the block it falls in (a tail block runs the same sequence), so each
// token's row is the same whatever the batch holds.
#include <immintrin.h>

#include <array>
#include <utility>

#include "backend/cpu/kernels/tile_gemm.h"

namespace k3::cpu {
namespace {

constexpr int kRows = 4, kTokens = 6;

template <int R, int T>
void register_block(const float* w, const float* x, int64_t k, float* y, int64_t ldy) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t i, __mmask16 mask) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w + r * k + i);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + t * k + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  };
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) step(i, static_cast<__mmask16>(0xFFFF));
  if (i < k) step(i, static_cast<__mmask16>((1u << (k - i)) - 1));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

using BlockFn = void (*)(const float*, const float*, int64_t, float*, int64_t);

template <int R, int... T>
constexpr std::array<BlockFn, sizeof...(T)> token_blocks(std::integer_sequence<int, T...>) {
  return {&register_block<R, T + 1>...};
}

// blocks[r - 1][t - 1]: the r-row, t-token block.
constexpr std::array<std::array<BlockFn, kTokens>, kRows> kBlocks = {
    token_blocks<1>(std::make_integer_sequence<int, kTokens>{}), token_blocks<2>(std::make_integer_sequence<int, kTokens>{}),
    token_blocks<3>(std::make_integer_sequence<int, kTokens>{}), token_blocks<4>(std::make_integer_sequence<int, kTokens>{})};
static_assert(kRows == 4, "kBlocks lists one row of blocks per row count");

}  // namespace

void gemm_rows_f32_avx512(const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < m; t0 += kTokens) {
    const int64_t nt = m - t0 < kTokens ? m - t0 : kTokens;
    for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const int64_t nr = rows - r0 < kRows ? rows - r0 : kRows;
      kBlocks[nr - 1][nt - 1](w + r0 * k, x + t0 * k, k, y + t0 * ldy + r0, ldy);
    }
  }
}

}  // namespace k3::cpu
