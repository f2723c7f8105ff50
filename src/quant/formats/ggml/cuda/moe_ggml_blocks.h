// GGML block formats for the GPU expert kernels (moe_ggml.h): one trait per format, compiled for the
// device by moe_ggml.cu, moe_ggml_gemv.cu and mla_absorb_ggml.cu and for the host by the CPU tests,
// which run every function below against the
// exact CPU references (quant/formats/ggml/ggml_dequant.h, the Int8Blocks activations of the CPU's
// ggml_matrix) without a GPU. Byte layouts: k3-quant-formats §6.2.
//
// A trait F has kType, kBlock (elements), kBytes (bytes per block, as stored in GGUF) and kParts
// (lanes per block; each part covers 32 of the block's elements, so a warp covers 1024 elements per
// step in every format), and, split so that the weight work is done once per weight row and the
// activation work once per token:
//   U unpack(blk, part)          the part's 32 codes as dp4a-ready signed bytes (or unsigned codes
//                                whose zero point / min comes back through the activation sums),
//                                its integer scales and the block's float scales, in registers.
//                                blk may point to global or shared memory (plain loads);
//   X xload(x, part)             one token's 32 activation codes of the part (ActBlock: codes, Σ codes
//                                per 16, scale) and the sums and scale the dot needs;
//   float dot(u, x)              Σ over the part's 32 elements of w·x: integer dp4a sums with the
//                                block's integer scales, then the float scales. A min / zero-point
//                                term of a group of 16 (or sub-block of 32) is carried by the part
//                                holding its first elements only (the others unpack a zero min), so
//                                the parts of a block sum to it;
//   float value(blk, i)          element i of the block (global memory), the same float operations in
//                                the same order as ggml's dequantisation (bit-identical; no FMA
//                                contraction);
//   decode8(blk, e0, v)          elements e0 … e0 + 7 (e0 % 8 == 0: one group of every format) as
//                                value() gives them, the group's scales and code bytes loaded once
//                                (the prefill GEMM's weight tiles, moe_ggml_mma.cuh).
// Activation contract (the CPU's, ggml's vec_dot_type): the activation block is the weight block
// (32 for Q4_0 / Q8_0, 256 for the K-quants); scale = amax / 127, code = round-half-even(x · 127 /
// amax) clamped to ±127, an all-zero block has scale 0 and codes 0.
// Alignment: Q4_K / Q5_K blocks are 16-byte multiples, Q2_K 4-byte, Q4_0 / Q8_0 / Q3_K / Q6_K only
// 2-byte; the loads below use the widest access the format's alignment allows (a copy to shared
// memory keeps the address modulo 16, so the same loads serve there).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/numeric.h"
#include "io/ggml_types.h"

namespace k3::cuda::ggml_blocks {

#define K3_GGML_HD __host__ __device__ __forceinline__

// One token's activations for one weight block: codes [kBlock], Σ codes per 16 [kBlock / 16], scale.
struct ActBlock {
  const int8_t* q;
  const int16_t* s16;
  float d;
};

// ---- loads and integer / float primitives (device: PTX intrinsics; host: plain C++) -----------------

// T at p (aligned to sizeof(T)) through the read-only data path on the device, memcpy on the host.
template <typename T>
K3_GGML_HD T ldg(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const T*>(p));
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}
// T at p as a plain load on the device (global or shared memory: unpack() reads blocks a kernel
// staged in shared memory), memcpy on the host.
template <typename T>
K3_GGML_HD T plain_load(const void* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

K3_GGML_HD uint32_t ld_u16(const uint8_t* p) { return ldg<unsigned short>(p); }
// 4 bytes at a 2-byte aligned address.
K3_GGML_HD uint32_t ld_u32_a2(const uint8_t* p) { return ld_u16(p) | ld_u16(p + 2) << 16; }
// 8 activation codes at an 8-byte aligned address (codes rows are 16-byte aligned).
K3_GGML_HD uint2 ld_x8(const int8_t* p) { return plain_load<uint2>(p); }
K3_GGML_HD uint4 ld_x16(const int8_t* p) { return plain_load<uint4>(p); }

// Plain loads of weight blocks (global or shared memory).
K3_GGML_HD uint32_t rd_u16(const uint8_t* p) { return plain_load<unsigned short>(p); }
K3_GGML_HD uint32_t rd_u32(const uint8_t* p) { return plain_load<unsigned int>(p); }  // 4-byte aligned
K3_GGML_HD uint32_t rd_u32_a2(const uint8_t* p) { return rd_u16(p) | rd_u16(p + 2) << 16; }  // 2-byte aligned
K3_GGML_HD uint4 rd_16(const uint8_t* p) { return plain_load<uint4>(p); }  // 16-byte aligned

// Bytes of the 8-byte value (hi:lo) picked by the four selector nibbles of s (PTX prmt, default mode).
K3_GGML_HD uint32_t prmt(uint32_t lo, uint32_t hi, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(lo, hi, s);
#else
  const uint64_t v = static_cast<uint64_t>(hi) << 32 | lo;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}
// Per byte: the unsigned code c (c < 128) minus the zero point z (z ≤ 128), as a signed byte. Borrow-free:
// every byte of c | 0x80 is ≥ 0x80 ≥ z before the subtraction.
K3_GGML_HD uint32_t sub_zero(uint32_t c, uint32_t z) {
  return ((c | 0x80808080u) - z * 0x01010101u) ^ 0x80808080u;
}

// Σ of the four signed byte products, plus c.
K3_GGML_HD int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i) c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
#endif
}

// c + the two signed 16-bit halves of a times the signed bytes 0, 1 (lo) or 2, 3 (hi) of b.
K3_GGML_HD int dp2a_lo(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp2a_lo(static_cast<int>(a), static_cast<int>(b), c);
#else
  return c + static_cast<int16_t>(a) * static_cast<int8_t>(b) + static_cast<int16_t>(a >> 16) * static_cast<int8_t>(b >> 8);
#endif
}
K3_GGML_HD int dp2a_hi(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp2a_hi(static_cast<int>(a), static_cast<int>(b), c);
#else
  return c + static_cast<int16_t>(a) * static_cast<int8_t>(b >> 16) +
         static_cast<int16_t>(a >> 16) * static_cast<int8_t>(b >> 24);
#endif
}

K3_GGML_HD float f16(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
#else
  return decode_f16(static_cast<uint16_t>(bits));
#endif
}
// Rounded float operations that are never contracted into an FMA (ggml's dequantisation rounds each).
K3_GGML_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
K3_GGML_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

K3_GGML_HD uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFFu; }
K3_GGML_HD uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Dot of 8 codes (two words) with 8 activation codes.
K3_GGML_HD int dot8(uint32_t w0, uint32_t w1, const uint2& x) { return dp4a(w1, x.y, dp4a(w0, x.x, 0)); }
// Dot of 16 codes (four words) with 16 activation codes.
K3_GGML_HD int dot16(const uint32_t (&w)[4], const uint4& x) {
  return dp4a(w[3], x.w, dp4a(w[2], x.z, dp4a(w[1], x.y, dp4a(w[0], x.x, 0))));
}
K3_GGML_HD int dot16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, const uint4& x) {
  return dp4a(w3, x.w, dp4a(w2, x.z, dp4a(w1, x.y, dp4a(w0, x.x, 0))));
}

// ---- 32-element formats: one part per block ----------------------------------------------------

// Q4_0, 18 bytes: f16 d; u8 qs[16] (low nibbles elements 0..15, high 16..31). w = d·(q − 8).
struct Q4_0 {
  static constexpr GgmlType kType = GgmlType::Q4_0;
  static constexpr int kBlock = 32, kBytes = 18, kParts = 1;
  struct U {
    uint32_t lo[4], hi[4];  // unsigned nibbles; the −8 comes back through Σ codes
    float d;
  };
  struct X {
    uint4 lo, hi;
    int sum;  // Σ of the 32 codes
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int) {
    U u;
    u.d = f16(rd_u16(b));
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = rd_u32_a2(b + 2 + 4 * i);
      u.lo[i] = q & 0x0F0F0F0Fu, u.hi[i] = (q >> 4) & 0x0F0F0F0Fu;
    }
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int) {
    return {ld_x16(x.q), ld_x16(x.q + 16), x.s16[0] + x.s16[1], x.d};
  }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    const int s = dot16(u.lo, x.lo) + dot16(u.hi, x.hi) - 8 * x.sum;
    return u.d * x.d * static_cast<float>(s);
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    const uint32_t q = b[2 + i % 16];
    return mul_rn(static_cast<float>(static_cast<int>(i < 16 ? q & 0x0F : q >> 4) - 8), f16(ld_u16(b)));
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const float d = f16(ld_u16(b));
    const uint32_t w[2] = {ld_u32_a2(b + 2 + e0 % 16), ld_u32_a2(b + 6 + e0 % 16)};
    const int shift = e0 < 16 ? 0 : 4;
    for (int j = 0; j < 8; ++j) {
      v[j] = mul_rn(static_cast<float>(static_cast<int>((byte_of(w[j / 4], j % 4) >> shift) & 0x0F) - 8), d);
    }
  }
};

// Q8_0, 34 bytes: f16 d; i8 qs[32]. w = d·q.
struct Q8_0 {
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static constexpr int kBlock = 32, kBytes = 34, kParts = 1;
  struct U {
    uint32_t q[8];
    float d;
  };
  struct X {
    uint4 lo, hi;
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int) {
    U u;
    u.d = f16(rd_u16(b));
    for (int i = 0; i < 8; ++i) u.q[i] = rd_u32_a2(b + 2 + 4 * i);
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int) { return {ld_x16(x.q), ld_x16(x.q + 16), x.d}; }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    return u.d * x.d *
           static_cast<float>(dot16(u.q[0], u.q[1], u.q[2], u.q[3], x.lo) + dot16(u.q[4], u.q[5], u.q[6], u.q[7], x.hi));
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    return mul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i])), f16(ld_u16(b)));
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const float d = f16(ld_u16(b));
    const uint32_t w[2] = {ld_u32_a2(b + 2 + e0), ld_u32_a2(b + 6 + e0)};
    for (int j = 0; j < 8; ++j) v[j] = mul_rn(static_cast<float>(static_cast<int8_t>(byte_of(w[j / 4], j % 4))), d);
  }
};

// ---- 256-element K-quants: eight parts of 32 elements per block ----------------------------------

// Q2_K and Q3_K share the element map: group g (16 elements) = half g/8, bit pair (g/2)%4, sub-block
// g%2, codes at byte 32·(g/8) + 16·(g%2) + l. Part p = (half h = p/4, sub = (p/2)%2, o = 8·(p%2)): the
// 8 bytes at 32h + 16·sub + o hold, for bit pair s = 0..3, elements l ∈ [o, o+8) of group 8h + 2s + sub.
K3_GGML_HD int k23_group(int p, int s) { return 8 * (p >> 2) + 2 * s + ((p >> 1) & 1); }
K3_GGML_HD int k23_offset(int p) { return 32 * (p >> 2) + 16 * ((p >> 1) & 1) + 8 * (p & 1); }

// Q2_K, 84 bytes: u8 scales[16] (low nibble scale, high nibble min); u8 qs[64]; f16 d; f16 dmin.
// w = d·sc_g·q − dmin·m_g.
struct Q2_K {
  static constexpr GgmlType kType = GgmlType::Q2_K;
  static constexpr int kBlock = 256, kBytes = 84, kParts = 8;
  struct U {
    uint32_t q[4][2];  // group s: codes 0..3 of elements o .. o+7
    int sc[4];
    uint32_t mn;       // byte s: group s's min (0 on the parts with o = 8)
    float d, dmin;
  };
  struct X {
    uint2 q[4];
    uint32_t s16[2];  // Σ codes of groups s = 0, 1 and 2, 3: two int16 each (dp2a's operand)
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int p) {
    U u;
    const uint8_t* q = b + 16 + k23_offset(p);
    const uint32_t q0 = rd_u32(q), q1 = rd_u32(q + 4);
    const int h = p >> 2, sub = (p >> 1) & 1;
    // Scale bytes 8h + 2s + sub, s = 0..3 (of the 8 at 8h).
    const uint32_t sc = prmt(rd_u32(b + 8 * h), rd_u32(b + 8 * h + 4), 0x6420u + 0x1111u * sub);
    u.mn = p & 1 ? 0u : (sc >> 4) & 0x0F0F0F0Fu;
    for (int s = 0; s < 4; ++s) {
      u.q[s][0] = (q0 >> (2 * s)) & 0x03030303u, u.q[s][1] = (q1 >> (2 * s)) & 0x03030303u;
      u.sc[s] = static_cast<int>(byte_of(sc, s) & 0x0F);
    }
    const uint32_t dd = rd_u32(b + 80);
    u.d = f16(dd & 0xFFFF), u.dmin = f16(dd >> 16);
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int p) {
    X v;
    for (int s = 0; s < 4; ++s) v.q[s] = ld_x8(x.q + 16 * k23_group(p, s) + 8 * (p & 1));
    // Groups 8h + 2s + sub: half h's eight sums (one 16-byte load; the sums of a 256-block are 32-byte
    // aligned), word s, low half for sub 0, high for sub 1.
    const uint4 sums = plain_load<uint4>(x.s16 + 8 * (p >> 2));
    const uint32_t pick = 0x5410u + 0x2222u * ((p >> 1) & 1);
    v.s16[0] = prmt(sums.x, sums.y, pick), v.s16[1] = prmt(sums.z, sums.w, pick);
    v.d = x.d;
    return v;
  }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    int isum = 0;
    for (int s = 0; s < 4; ++s) isum += u.sc[s] * dot8(u.q[s][0], u.q[s][1], x.q[s]);
    const int imin = dp2a_hi(x.s16[1], u.mn, dp2a_lo(x.s16[0], u.mn, 0));
    return x.d * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(imin));
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    const int g = i / 16, l = i % 16;
    const uint32_t q = b[16 + 32 * (g / 8) + 16 * (g % 2) + l], sc = b[g];
    const float dl = mul_rn(f16(ld_u16(b + 80)), static_cast<float>(sc & 0x0F));
    const float ml = mul_rn(f16(ld_u16(b + 82)), static_cast<float>(sc >> 4));
    return sub_rn(mul_rn(dl, static_cast<float>((q >> (2 * ((g / 2) % 4))) & 3)), ml);
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const int g = e0 / 16;
    const uint8_t* q = b + 16 + 32 * (g / 8) + 16 * (g % 2) + e0 % 16;  // blocks are 4-byte aligned
    const uint32_t w[2] = {ldg<uint32_t>(q), ldg<uint32_t>(q + 4)}, sc = b[g];
    const float dl = mul_rn(f16(ld_u16(b + 80)), static_cast<float>(sc & 0x0F));
    const float ml = mul_rn(f16(ld_u16(b + 82)), static_cast<float>(sc >> 4));
    const int shift = 2 * ((g / 2) % 4);
    for (int j = 0; j < 8; ++j) {
      v[j] = sub_rn(mul_rn(dl, static_cast<float>((byte_of(w[j / 4], j % 4) >> shift) & 3)), ml);
    }
  }
};

// Q3_K, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 signed 6-bit scales); f16 d.
// w = d·S_g·(u − 4), u = 2 low bits | hmask bit g/2 << 2 (hmask byte 16·(g%2) + l).
struct Q3_K {
  static constexpr GgmlType kType = GgmlType::Q3_K;
  static constexpr int kBlock = 256, kBytes = 110, kParts = 8;
  K3_GGML_HD static int scale(const uint32_t (&s)[3], int j) {
    const uint32_t lo = j < 8 ? byte_of(s[j / 4], j % 4) & 0x0F : byte_of(s[(j - 8) / 4], (j - 8) % 4) >> 4;
    const uint32_t hi = (byte_of(s[2], j % 4) >> (2 * (j / 4))) & 3;
    return static_cast<int>(lo | hi << 4) - 32;
  }
  struct U {
    uint32_t q[4][2];  // group s: signed codes u − 4 of elements o .. o+7
    int sc[4];
    float d;
  };
  struct X {
    uint2 q[4];
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int p) {
    U u;
    const int h = p >> 2, sub = (p >> 1) & 1;
    const uint8_t* q = b + 32 + k23_offset(p);
    const uint8_t* hm = b + 16 * sub + 8 * (p & 1);
    const uint32_t q0 = rd_u32_a2(q), q1 = rd_u32_a2(q + 4), h0 = rd_u32_a2(hm), h1 = rd_u32_a2(hm + 4);
    // Scales of groups j = 8h + 2s + sub (scale() below, four at once): low 4 bits = nibble h of byte
    // 2s + sub of bytes 96..103; high 2 bits = bits 2·(j / 4) of byte j % 4 of bytes 104..107.
    const uint32_t s2 = rd_u32_a2(b + 104);
    const uint32_t lo = (prmt(rd_u32_a2(b + 96), rd_u32_a2(b + 100), 0x6420u + 0x1111u * sub) >> (4 * h)) & 0x0F0F0F0Fu;
    const uint32_t hb = prmt(s2, s2, 0x2020u + 0x1111u * sub);
    const uint32_t hi = ((hb >> (4 * h)) & 0x00000303u) | ((hb >> (4 * h + 2)) & 0x03030000u);
    const uint32_t sc = lo | hi << 4;
    for (int s = 0; s < 4; ++s) {
      const int hbit = 4 * h + s;
      u.q[s][0] = sub_zero(((q0 >> (2 * s)) & 0x03030303u) | ((h0 >> hbit) & 0x01010101u) << 2, 4);
      u.q[s][1] = sub_zero(((q1 >> (2 * s)) & 0x03030303u) | ((h1 >> hbit) & 0x01010101u) << 2, 4);
      u.sc[s] = static_cast<int>(byte_of(sc, s)) - 32;
    }
    u.d = f16(rd_u16(b + 108));
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int p) {
    X v;
    for (int s = 0; s < 4; ++s) v.q[s] = ld_x8(x.q + 16 * k23_group(p, s) + 8 * (p & 1));
    v.d = x.d;
    return v;
  }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    int isum = 0;
    for (int s = 0; s < 4; ++s) isum += u.sc[s] * dot8(u.q[s][0], u.q[s][1], x.q[s]);
    return u.d * x.d * static_cast<float>(isum);
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    const int g = i / 16, idx = 16 * (g % 2) + i % 16;
    const uint32_t s[3] = {ld_u32_a2(b + 96), ld_u32_a2(b + 100), ld_u32_a2(b + 104)};
    const float dl = mul_rn(f16(ld_u16(b + 108)), static_cast<float>(scale(s, g)));
    const int v = static_cast<int>((b[32 + 32 * (g / 8) + idx] >> (2 * ((g / 2) % 4))) & 3) -
                  ((b[idx] >> (g / 2)) & 1 ? 0 : 4);
    return mul_rn(dl, static_cast<float>(v));
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const int g = e0 / 16, idx = 16 * (g % 2) + e0 % 16;
    const uint32_t s[3] = {ld_u32_a2(b + 96), ld_u32_a2(b + 100), ld_u32_a2(b + 104)};
    const float dl = mul_rn(f16(ld_u16(b + 108)), static_cast<float>(scale(s, g)));
    const uint8_t* q = b + 32 + 32 * (g / 8) + idx;
    const uint32_t w[2] = {ld_u32_a2(q), ld_u32_a2(q + 4)}, hm[2] = {ld_u32_a2(b + idx), ld_u32_a2(b + idx + 4)};
    const int shift = 2 * ((g / 2) % 4), bit = g / 2;
    for (int j = 0; j < 8; ++j) {
      const int u = static_cast<int>((byte_of(w[j / 4], j % 4) >> shift) & 3) -
                    ((byte_of(hm[j / 4], j % 4) >> bit) & 1 ? 0 : 4);
      v[j] = mul_rn(dl, static_cast<float>(u));
    }
  }
};

// Q4_K (144 bytes: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]) and Q5_K (176 bytes: the same header;
// u8 qh[32]; u8 qs[128]). Chunk c (64 elements) = low nibbles of qs[32c ..+32] (sub-block 2c), then
// their high nibbles (sub-block 2c+1); Q5_K's 5th bits are bits 2c, 2c+1 of qh[l].
// w = d·sc_j·q − dmin·m_j. Part p = (chunk c = p/2, o = 16·(p%2)): qs bytes [32c + o, +16).
template <bool kFive>
struct QK4 {
  static constexpr GgmlType kType = kFive ? GgmlType::Q5_K : GgmlType::Q4_K;
  static constexpr int kBlock = 256, kBytes = kFive ? 176 : 144, kParts = 8;
  static constexpr int kQs = kFive ? 48 : 16;
  // 6-bit scale and min of sub-block j from the 12 packed bytes (bytes 4..15 of the header).
  K3_GGML_HD static void scale_min(const uint4& h, int j, uint32_t& sc, uint32_t& mn) {
    auto s = [&](int k) { return byte_of(word_of(h, (k + 4) / 4), (k + 4) % 4); };
    if (j < 4) {
      sc = s(j) & 63, mn = s(j + 4) & 63;
    } else {
      sc = (s(j + 4) & 0x0F) | (s(j - 4) >> 6) << 4;
      mn = (s(j + 4) >> 4) | (s(j) >> 6) << 4;
    }
  }
  struct U {
    uint32_t lo[4], hi[4];  // codes of sub-blocks 2c and 2c + 1, elements o .. o+15
    int sc1, sc2;
    uint32_t mn;  // bytes: the min of sub-block 2c twice, then of 2c + 1 twice (0 on the parts with o = 16)
    float d, dmin;
  };
  struct X {
    uint4 lo, hi;
    uint2 s16;  // Σ codes of the four 16-groups of sub-blocks 2c, 2c + 1: two int16 each (dp2a's operand)
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int p) {
    U u;
    const int c = p >> 1;
    const uint4 h = rd_16(b);  // d, dmin, scales: the block's 8 lanes read the same 16 bytes
    const uint4 qs = rd_16(b + kQs + 32 * c + 16 * (p & 1));
    uint4 qh{};
    if constexpr (kFive) qh = rd_16(b + 16 + 16 * (p & 1));
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = word_of(qs, i);
      u.lo[i] = q & 0x0F0F0F0Fu, u.hi[i] = (q >> 4) & 0x0F0F0F0Fu;
      if constexpr (kFive) {
        const uint32_t hw = word_of(qh, i);
        u.lo[i] |= ((hw >> (2 * c)) & 0x01010101u) << 4;
        u.hi[i] |= ((hw >> (2 * c + 1)) & 0x01010101u) << 4;
      }
    }
    // scale_min() for all 8 sub-blocks at once (bytes j of sc / mn, j < 4 from the low words), then
    // bytes 2c, 2c + 1: no branch on the lane's sub-block.
    const uint32_t sc = c < 2 ? h.y & 0x3F3F3F3Fu : (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    const uint32_t mn = c < 2 ? h.z & 0x3F3F3F3Fu : ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    const int sh = 16 * (c & 1);
    u.sc1 = static_cast<int>((sc >> sh) & 0xFF), u.sc2 = static_cast<int>((sc >> (sh + 8)) & 0xFF);
    const uint32_t b0 = static_cast<uint32_t>(sh / 8), pick = b0 * 0x0011u + (b0 + 1) * 0x1100u;
    u.mn = prmt(mn, 0u, p & 1 ? 0x4444u : pick);
    u.d = f16(h.x & 0xFFFF), u.dmin = f16(h.x >> 16);
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int p) {
    const int c = p >> 1, o = 16 * (p & 1);
    return {ld_x16(x.q + 64 * c + o), ld_x16(x.q + 64 * c + 32 + o), plain_load<uint2>(x.s16 + 4 * c), x.d};
  }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    const int isum = u.sc1 * dot16(u.lo, x.lo) + u.sc2 * dot16(u.hi, x.hi);
    const int imin = dp2a_hi(x.s16.y, u.mn, dp2a_lo(x.s16.x, u.mn, 0));
    return x.d * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(imin));
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    const int c = i / 64, j = 2 * c + (i % 64) / 32, l = i % 32;
    const uint4 h = ldg<uint4>(b);  // 16-byte aligned
    uint32_t sc, mn;
    scale_min(h, j, sc, mn);
    const uint32_t byte = b[kQs + 32 * c + l];
    uint32_t q = j % 2 == 0 ? byte & 0x0F : byte >> 4;
    if constexpr (kFive) q += (b[16 + l] >> j) & 1 ? 16 : 0;
    const float d1 = mul_rn(f16(h.x & 0xFFFF), static_cast<float>(sc));
    const float m1 = mul_rn(f16(h.x >> 16), static_cast<float>(mn));
    return sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const int c = e0 / 64, j = 2 * c + (e0 % 64) / 32, l = e0 % 32;
    const uint4 h = ldg<uint4>(b);  // 16-byte aligned
    uint32_t sc, mn;
    scale_min(h, j, sc, mn);
    const uint2 qw = ldg<uint2>(b + kQs + 32 * c + l);
    const float d1 = mul_rn(f16(h.x & 0xFFFF), static_cast<float>(sc));
    const float m1 = mul_rn(f16(h.x >> 16), static_cast<float>(mn));
    uint2 hw{};
    if constexpr (kFive) hw = ldg<uint2>(b + 16 + l);
    for (int i = 0; i < 8; ++i) {
      uint32_t q = (byte_of(i < 4 ? qw.x : qw.y, i % 4) >> (4 * (j % 2))) & 0x0F;
      if constexpr (kFive) q += (byte_of(i < 4 ? hw.x : hw.y, i % 4) >> j) & 1 ? 16 : 0;
      v[i] = sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
    }
  }
};
using Q4_K = QK4<false>;
using Q5_K = QK4<true>;

// Q6_K, 210 bytes: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. w = d·sc_g·(q − 32), q 6-bit.
// Half hh (128 elements): L = ql + 64hh, H = qh + 32hh; for l < 32, quarter k: element 128hh + 32k + l
// = (L[l + 32·(k%2)] >> 4·(k/2)) & 0xF | ((H[l] >> 2k) & 3) << 4, group 8hh + 2k + l/16.
// Part p = (hh = p/4, l ∈ [8·(p%4), +8)).
struct Q6_K {
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr int kBlock = 256, kBytes = 210, kParts = 8;
  struct U {
    uint32_t q[4][2];  // quarter k: signed codes q − 32 of elements l .. l+7
    int sc[4];         // scales of groups 8hh + 2k + t (t = (p%4)/2)
    float d;
  };
  struct X {
    uint2 q[4];
    float d;
  };
  K3_GGML_HD static U unpack(const uint8_t* b, int p) {
    U u;
    const int hh = p >> 2, l = 8 * (p & 3), t = (p & 3) >> 1;
    const uint8_t* L = b + 64 * hh + l;
    const uint8_t* H = b + 128 + 32 * hh + l;
    const uint32_t l0[2] = {rd_u32_a2(L), rd_u32_a2(L + 4)}, l32[2] = {rd_u32_a2(L + 32), rd_u32_a2(L + 36)};
    const uint32_t hw[2] = {rd_u32_a2(H), rd_u32_a2(H + 4)};
    const uint32_t sc = prmt(rd_u32_a2(b + 192 + 8 * hh), rd_u32_a2(b + 196 + 8 * hh), 0x6420u + 0x1111u * t);
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 2; ++i) {
        const uint32_t low = ((k % 2 == 0 ? l0[i] : l32[i]) >> (4 * (k / 2))) & 0x0F0F0F0Fu;
        u.q[k][i] = sub_zero(low | ((hw[i] >> (2 * k)) & 0x03030303u) << 4, 32);
      }
      u.sc[k] = static_cast<int>(static_cast<int8_t>(byte_of(sc, k)));
    }
    u.d = f16(rd_u16(b + 208));
    return u;
  }
  K3_GGML_HD static X xload(const ActBlock& x, int p) {
    X v;
    const int hh = p >> 2, l = 8 * (p & 3);
    for (int k = 0; k < 4; ++k) v.q[k] = ld_x8(x.q + 128 * hh + 32 * k + l);
    v.d = x.d;
    return v;
  }
  K3_GGML_HD static float dot(const U& u, const X& x) {
    int isum = 0;
    for (int k = 0; k < 4; ++k) isum += u.sc[k] * dot8(u.q[k][0], u.q[k][1], x.q[k]);
    return u.d * x.d * static_cast<float>(isum);
  }
  K3_GGML_HD static float value(const uint8_t* b, int i) {
    const int hh = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint32_t low = (b[64 * hh + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0x0F;
    const uint32_t high = (b[128 + 32 * hh + l] >> (2 * k)) & 3;
    const float ds = mul_rn(f16(ld_u16(b + 208)), static_cast<float>(static_cast<int8_t>(b[192 + 8 * hh + 2 * k + l / 16])));
    return mul_rn(ds, static_cast<float>(static_cast<int>(low | high << 4) - 32));
  }
  K3_GGML_HD static void decode8(const uint8_t* b, int e0, float (&v)[8]) {
    const int hh = e0 / 128, k = (e0 % 128) / 32, l = e0 % 32;
    const uint8_t* lo = b + 64 * hh + l + 32 * (k % 2);
    const uint8_t* hi = b + 128 + 32 * hh + l;
    const uint32_t lw[2] = {ld_u32_a2(lo), ld_u32_a2(lo + 4)}, hw[2] = {ld_u32_a2(hi), ld_u32_a2(hi + 4)};
    const float ds = mul_rn(f16(ld_u16(b + 208)), static_cast<float>(static_cast<int8_t>(b[192 + 8 * hh + 2 * k + l / 16])));
    for (int j = 0; j < 8; ++j) {
      const uint32_t low = (byte_of(lw[j / 4], j % 4) >> (4 * (k / 2))) & 0x0F;
      const uint32_t high = (byte_of(hw[j / 4], j % 4) >> (2 * k)) & 3;
      v[j] = mul_rn(ds, static_cast<float>(static_cast<int>(low | high << 4) - 32));
    }
  }
};

// Calls fn(Trait{}) for the trait of `type`; returns false when there is none.
template <class Fn>
bool visit(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::Q4_0: fn(Q4_0{}); return true;
    case GgmlType::Q8_0: fn(Q8_0{}); return true;
    case GgmlType::Q2_K: fn(Q2_K{}); return true;
    case GgmlType::Q3_K: fn(Q3_K{}); return true;
    case GgmlType::Q4_K: fn(Q4_K{}); return true;
    case GgmlType::Q5_K: fn(Q5_K{}); return true;
    case GgmlType::Q6_K: fn(Q6_K{}); return true;
    default: return false;
  }
}

#undef K3_GGML_HD

}  // namespace k3::cuda::ggml_blocks
