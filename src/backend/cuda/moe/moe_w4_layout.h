// Bit layout of a packed 4-bit expert bank on the GPU (moe_w4.h), as constexpr helpers shared by the
// host repack (moe_w4.cpp), the kernels (moe_w4_gemm.cuh, through --expt-relaxed-constexpr) and
// the tests. No CUDA types here.
//
// A bank of R = E·N rows × K is cut into 16-row groups and 64-column chunks; group G, chunk c is
//   codes:  512 bytes at (G·K/64 + c)·512: lane L (g = L/4, t = L%4) owns bytes [16L, 16L + 16),
//           four little-endian words, word s = the lane's mma.sync m16n8k16 A fragment of k16 step s
//           (columns 64c + 16s …): registers a0…a3 = rows (g, g+8, g, g+8) × columns (2t, 2t+1) + 8·(i/2)
//           of the group. Register a_i takes `slot` i: its even column's code in the low 16 bits, its odd
//           column's code in the high 16 bits, at the bit positions of kSlotBits below.
//   scales: S = 16·B bytes at (G·K/64 + c)·S, B = blocks per chunk (NVFP4: 4 of 16 columns, MXFP4:
//           2 of 32): byte (g·B + j)·2 + h is block j's scale of row g + 8h, so lane (g, t) reads its
//           2·B bytes with one load.
// An expert's rows are contiguous, so expert e's codes start at e·N·K/2 and its scales at e·N·K/group
// (the checkpoint's offsets; sizes are unchanged by the repack).
//
// Decoding (the kernels): slot i of word w becomes a bf16x2 whose halves are sign | E2M1 magnitude bits
// at bf16 bits 8..6, i.e. the bf16 value E2M1·2^-126 (a subnormal for codes 0, ±0.5); one bf16x2
// multiply by F = scale·2^119 turns it into the operand E2M1·scale·2^-7, exact (≤ 6 significant bits,
// within bf16's range). The epilogue multiplies the fp32 accumulator by 2^7 · the per-expert scale.
// F comes from the stored scale byte b in one multiply-add: F bits = b·kScaleMul + kScaleAdd, where the
// stored byte is
//   NVFP4: the E4M3 block scale re-encoded as unsigned E5M3 with bias 9 (E4M3's 2^-9 … 448 become
//          normal numbers); a negative scale is stored as its magnitude with the block's code signs
//          flipped, a zero scale as 1.0 with the block's codes zeroed (both exact); NaN is rejected.
//   MXFP4: the E8M0 exponent e as is; e ≤ 135 (scales up to 2^8) so that F = 2^(e-8) fits bf16.
#pragma once

#include <cstdint>

namespace k3::cuda::w4 {

inline constexpr int kRowGroup = 16;     // rows per group (one mma m16 fragment)
inline constexpr int kChunk = 64;        // columns per chunk (4 k16 steps, one 16-byte load per lane)
inline constexpr int kChunkCodeBytes = kRowGroup * kChunk / 2;  // 512
inline constexpr int kOffsetLog2 = 7;    // operands carry 2^-7, the epilogue 2^7
inline constexpr int kMxfp4MaxExponent = 135;

struct FormatBits {
  int group;             // columns per block scale
  uint32_t scale_mul;    // F bits = byte·scale_mul + scale_add
  uint32_t scale_add;
};
inline constexpr FormatBits kNvfp4Bits{16, 16u, 237u << 7};   // F = 2^(E5 + 110)·(1 + m/8) = s·2^119
inline constexpr FormatBits kMxfp4Bits{32, 128u, 119u << 7};  // F = 2^(e − 8) = 2^(e−127)·2^119

constexpr int blocks_per_chunk(const FormatBits& f) { return kChunk / f.group; }
constexpr int scale_bytes_per_chunk(const FormatBits& f) { return kRowGroup * blocks_per_chunk(f); }
constexpr int scale_bytes_per_lane(const FormatBits& f) { return 2 * blocks_per_chunk(f); }

// Row (within the group) and column (within the k16 step) of slot i, half h of lane L's word.
constexpr int fragment_row(int lane, int slot) { return lane / 4 + 8 * (slot & 1); }
constexpr int fragment_col(int lane, int slot, int half) { return 2 * (lane % 4) + 8 * (slot >> 1) + half; }
// Byte of the chunk's scale block for row r (0..15) and block j.
constexpr int scale_byte_index(const FormatBits& f, int row, int block) {
  return ((row % 8) * blocks_per_chunk(f) + block) * 2 + row / 8;
}

// Bit positions (within a 16-bit half) of a code's m, e0, e1 and sign bits in each slot. Slots 0–2
// decode with one shift and one mask (magnitude at 6..8 and sign at 15 after the shift); slot 3 takes
// the four bits left over.
inline constexpr int kSlotBits[4][4] = {{6, 7, 8, 15}, {3, 4, 5, 12}, {0, 1, 2, 9}, {10, 11, 13, 14}};

constexpr uint32_t place_code(uint32_t code, int slot, int half) {
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= ((code >> b) & 1u) << kSlotBits[slot][b];
  return v << (16 * half);
}

// bf16x2 bits of slot i: sign | magnitude at bits 8..6 in both halves (= E2M1 · 2^-126).
constexpr uint32_t unpack_slot(uint32_t w, int slot) {
  constexpr uint32_t kMask = 0x81C081C0u;
  switch (slot) {
    case 0: return w & kMask;
    case 1: return (w << 3) & kMask;
    case 2: return (w << 6) & kMask;
    default:
      return ((w >> 4) & 0x00C000C0u) | ((w >> 5) & 0x01000100u) | ((w << 1) & 0x80008000u);
  }
}

// bf16x2 bits of F for two scale bytes already spread to bits 0..7 and 16..23.
constexpr uint32_t scale_f_pair(uint32_t scale_mul, uint32_t scale_add, uint32_t spread) {
  return spread * scale_mul + (scale_add | (scale_add << 16));
}

}  // namespace k3::cuda::w4
