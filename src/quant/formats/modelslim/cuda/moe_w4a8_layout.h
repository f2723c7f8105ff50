// Bit layout of a ModelSlim W4A8 expert bank on the GPU (moe_w4a8.h), as constexpr helpers shared by
// the host repack (moe_w4a8.cpp), the kernel (moe_w4a8.cu, through --expt-relaxed-constexpr) and the
// tests. No CUDA types here.
//
// A bank of R = E·N rows × K is cut into 16-row groups and 64-column chunks; group G, chunk c is
//   codes:  512 bytes at (G·K/64 + c)·512: lane L (g = L/4, t = L%4) owns bytes [16L, 16L + 16), four
//           little-endian words; word w belongs to k32 step w/2 of the chunk and holds, for columns
//           32·(w/2) + 16·(w%2) + 4t + b (b = byte 0..3), row g's signed int4 code in the LOW nibble of
//           byte b and row g+8's in the HIGH nibble. So one word yields two mma.sync m16n8k32 s8 A
//           registers with one mask each — high nibbles `w & 0xF0F0F0F0` (row g+8), low nibbles
//           `(w << 4) & 0xF0F0F0F0` (row g) — holding 16·q as s8 (exact: q ∈ [-8, 7] → [-128, 112]).
//           Step s: a0 = low(word 2s), a1 = high(word 2s), a2 = low(word 2s+1), a3 = high(word 2s+1).
//           The kernel's int32 sums are 16·Σ q·c; the 1/16 goes into the fp32 epilogue (exact).
//   scales: f32, per 16-row group and scale group j (K/group of them per row): 16 values at
//           (G·groups + j)·16, row r at 2·(r % 8) + r / 8, so lane (g, t) reads rows g, g+8 as one float2.
//           The value is the checkpoint's weight_scale · weight_scale_second in fp32 (per channel:
//           weight_scale alone), the same product the CPU's int8_dot kernel applies per block.
// An expert's rows are contiguous: expert e's codes start at e·N·K/2, its scales at e·N·(K/group).
#pragma once

#include <cstdint>

namespace k3::cuda::w4a8 {

inline constexpr int kRowGroup = 16;                            // rows per group (one mma m16 fragment)
inline constexpr int kChunk = 64;                               // columns per chunk (two k32 steps)
inline constexpr int kChunkCodeBytes = kRowGroup * kChunk / 2;  // 512
inline constexpr int kCodeShift = 4;                            // operands carry 16·q
inline constexpr uint32_t kHighNibbles = 0xF0F0F0F0u;

// Row (within the 16-row group) of nibble `high` of lane L's bytes, and column (within the chunk) of
// byte b of word w.
constexpr int fragment_row(int lane, int high) { return lane / 4 + 8 * high; }
constexpr int fragment_col(int lane, int word, int byte) { return 32 * (word / 2) + 16 * (word % 2) + 4 * (lane % 4) + byte; }

// The two s8x4 A registers of one word: rows g (low nibbles) and g+8 (high nibbles), each byte 16·q.
constexpr uint32_t operand_low(uint32_t w) { return (w << 4) & kHighNibbles; }
constexpr uint32_t operand_high(uint32_t w) { return w & kHighNibbles; }

// Index of row r (0..15) within a 16-row group's block of 16 scales.
constexpr int scale_slot(int row) { return 2 * (row % 8) + row / 8; }

}  // namespace k3::cuda::w4a8
