// Portable reference kernels of every GGML format with an integer kernel, and the dispatcher.
// Each block is first unpacked to small integers in natural element order, then dotted with every
// token's int8 codes; the float scales are applied per block exactly as the format defines them
// (comments per format). The SIMD tiers compute the same sums in another order.
#include <algorithm>
#include <cstring>

#include "quant/formats/ggml/cpu/ggml_dot_impl.h"

namespace k3::cpu::ggml {
namespace {

template <class T>
inline int32_t idot(const T* w, const int8_t* x, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<int32_t>(w[i]) * x[i];
  return s;
}

// ---- 32-element blocks: one activation scale per weight block ------------------------------

// Q4_0: w = d·(q − 8), q = nibble. Σ w·x = d·dx·(Σ q·x − 8·Σ x).
struct Q4_0 {
  static constexpr size_t kBytes = kQ4_0Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w);
    uint8_t q[32];
    for (int j = 0; j < 16; ++j) q[j] = w[2 + j] & 0x0F, q[j + 16] = w[2 + j] >> 4;
    for (int t = 0; t < nt; ++t) {
      const int32_t s = idot(q, a[t].q + 32 * b, 32) - 8 * a[t].s32[b];
      acc[t] += d * a[t].d[b] * static_cast<float>(s);
    }
  }
};

// Q4_1: w = d·q + m. Σ w·x = dx·(d·Σ q·x + m·Σ x).
struct Q4_1 {
  static constexpr size_t kBytes = kQ4_1Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w), m = load_f16(w + 2);
    uint8_t q[32];
    for (int j = 0; j < 16; ++j) q[j] = w[4 + j] & 0x0F, q[j + 16] = w[4 + j] >> 4;
    for (int t = 0; t < nt; ++t) {
      const int32_t s = idot(q, a[t].q + 32 * b, 32);
      acc[t] += a[t].d[b] * (d * static_cast<float>(s) + m * static_cast<float>(a[t].s32[b]));
    }
  }
};

// The 5-bit codes of Q5_0 / Q5_1: nibble | bit j of qh << 4.
inline void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, uint8_t q[32]) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<uint8_t>((qs[j] & 0x0F) | ((qh >> j) & 1) << 4);
    q[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
  }
}

// Q5_0: w = d·(q − 16). Σ w·x = d·dx·(Σ q·x − 16·Σ x).
struct Q5_0 {
  static constexpr size_t kBytes = kQ5_0Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w);
    uint8_t q[32];
    unpack_q5(w + 2, w + 6, q);
    for (int t = 0; t < nt; ++t) {
      const int32_t s = idot(q, a[t].q + 32 * b, 32) - 16 * a[t].s32[b];
      acc[t] += d * a[t].d[b] * static_cast<float>(s);
    }
  }
};

// Q5_1: w = d·q + m. Σ w·x = dx·(d·Σ q·x + m·Σ x).
struct Q5_1 {
  static constexpr size_t kBytes = kQ5_1Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w), m = load_f16(w + 2);
    uint8_t q[32];
    unpack_q5(w + 4, w + 8, q);
    for (int t = 0; t < nt; ++t) {
      const int32_t s = idot(q, a[t].q + 32 * b, 32);
      acc[t] += a[t].d[b] * (d * static_cast<float>(s) + m * static_cast<float>(a[t].s32[b]));
    }
  }
};

// Q8_0: w = d·q. Σ w·x = d·dx·Σ q·x.
struct Q8_0 {
  static constexpr size_t kBytes = kQ8_0Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w);
    const auto* q = reinterpret_cast<const int8_t*>(w + 2);
    for (int t = 0; t < nt; ++t) acc[t] += d * a[t].d[b] * static_cast<float>(idot(q, a[t].q + 32 * b, 32));
  }
};

// MXFP4: w = 2^(e−128)·v, v the doubled E2M1 value (an integer). Σ w·x = 2^(e−128)·dx·Σ v·x.
struct Mxfp4 {
  static constexpr size_t kBytes = kMxfp4Bytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = e8m0_half(w[0]);
    int8_t v[32];
    for (int j = 0; j < 16; ++j) v[j] = kMxfp4Doubled[w[1 + j] & 0x0F], v[j + 16] = kMxfp4Doubled[w[1 + j] >> 4];
    for (int t = 0; t < nt; ++t) acc[t] += d * a[t].d[b] * static_cast<float>(idot(v, a[t].q + 32 * b, 32));
  }
};

// ---- 256-element K-quant super-blocks: one activation scale per super-block -----------------

// Q2_K: w = d·sc_g·q − dmin·m_g per group g of 16. Σ w·x = dx·(d·Σ_g sc_g·Σ q·x − dmin·Σ_g m_g·Σ x).
struct Q2_K {
  static constexpr size_t kBytes = kQ2_KBytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w + 80), dmin = load_f16(w + 82);
    uint8_t q[256];
    for (int g = 0; g < 16; ++g) {
      const uint8_t* src = w + 16 + 32 * (g / 8) + 16 * (g % 2);
      const int shift = 2 * ((g / 2) % 4);
      for (int l = 0; l < 16; ++l) q[16 * g + l] = (src[l] >> shift) & 3;
    }
    for (int t = 0; t < nt; ++t) {
      const int8_t* x = a[t].q + 256 * b;
      int32_t isum = 0, imin = 0;
      for (int g = 0; g < 16; ++g) {
        isum += (w[g] & 0x0F) * idot(q + 16 * g, x + 16 * g, 16);
        imin += (w[g] >> 4) * a[t].s16[16 * b + g];
      }
      acc[t] += a[t].d[b] * (d * static_cast<float>(isum) - dmin * static_cast<float>(imin));
    }
  }
};

// Q3_K: w = d·s_g·(u − 4), u = 2 low bits | high bit << 2 ∈ [0, 7], s_g signed.
// Σ w·x = d·dx·Σ_g s_g·(Σ u·x − 4·Σ x).
struct Q3_K {
  static constexpr size_t kBytes = kQ3_KBytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w + 108);
    int8_t sc[16];
    unpack_q3_scales(w + 96, sc);
    uint8_t u[256];
    for (int g = 0; g < 16; ++g) {  // half g/8, bit pair (g/2)%4, sub-block g%2; hmask bit g/2
      const uint8_t* lo = w + 32 + 32 * (g / 8) + 16 * (g % 2);
      const uint8_t* hi = w + 16 * (g % 2);
      const int shift = 2 * ((g / 2) % 4), hbit = g / 2;
      for (int l = 0; l < 16; ++l) u[16 * g + l] = static_cast<uint8_t>(((lo[l] >> shift) & 3) | ((hi[l] >> hbit) & 1) << 2);
    }
    for (int t = 0; t < nt; ++t) {
      const int8_t* x = a[t].q + 256 * b;
      int32_t isum = 0;
      for (int g = 0; g < 16; ++g) isum += sc[g] * (idot(u + 16 * g, x + 16 * g, 16) - 4 * a[t].s16[16 * b + g]);
      acc[t] += d * a[t].d[b] * static_cast<float>(isum);
    }
  }
};

// Q4_K / Q5_K: w = d·sc_j·q − dmin·m_j per sub-block j of 32.
// Σ w·x = dx·(d·Σ_j sc_j·Σ q·x − dmin·Σ_j m_j·Σ x).
template <bool kFive>
struct QK4 {
  static constexpr size_t kBytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w), dmin = load_f16(w + 2);
    uint8_t sc[8], mn[8];
    unpack_k4_scales(w + 4, sc, mn);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + (kFive ? 48 : 16);
    uint8_t q[256];
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = qs[32 * c + l] & 0x0F;
        q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        if (kFive) {
          q[64 * c + l] |= ((qh[l] >> (2 * c)) & 1) << 4;
          q[64 * c + 32 + l] |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
        }
      }
    }
    for (int t = 0; t < nt; ++t) {
      const int8_t* x = a[t].q + 256 * b;
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        isum += sc[j] * idot(q + 32 * j, x + 32 * j, 32);
        imin += mn[j] * a[t].s32[8 * b + j];
      }
      acc[t] += a[t].d[b] * (d * static_cast<float>(isum) - dmin * static_cast<float>(imin));
    }
  }
};

// Q6_K: w = d·sc_g·(q − 32), q 6-bit, sc_g signed per group of 16.
// Σ w·x = d·dx·Σ_g sc_g·(Σ q·x − 32·Σ x).
struct Q6_K {
  static constexpr size_t kBytes = kQ6_KBytes;
  static void block(const uint8_t* w, int64_t b, const TokenActs* a, int nt, float* acc) {
    const float d = load_f16(w + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    uint8_t q[256];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      for (int l = 0; l < 32; ++l) {
        uint8_t* o = q + 128 * half + l;
        o[0] = static_cast<uint8_t>((ql[l] & 0x0F) | (qh[l] & 3) << 4);
        o[32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4);
        o[64] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
        o[96] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
      }
    }
    for (int t = 0; t < nt; ++t) {
      const int8_t* x = a[t].q + 256 * b;
      int32_t isum = 0;
      for (int g = 0; g < 16; ++g) isum += sc[g] * (idot(q + 16 * g, x + 16 * g, 16) - 32 * a[t].s16[16 * b + g]);
      acc[t] += d * a[t].d[b] * static_cast<float>(isum);
    }
  }
};

template <class F, int NT>
void scalar_rows(const RowsArgs& r) {
  for_each_row<NT>(r, [&](const uint8_t* w, float* acc) {
    std::fill(acc, acc + NT, 0.0f);
    for (int64_t b = 0; b < r.nblocks; ++b) F::block(w + b * F::kBytes, b, r.acts, NT, acc);
  });
}

template <class F>
constexpr Kernel scalar_kernel() {
  return Kernel{{scalar_rows<F, 1>, scalar_rows<F, 2>, scalar_rows<F, 3>, scalar_rows<F, 4>}, "scalar"};
}

constexpr Kernel kQ4_0 = scalar_kernel<Q4_0>(), kQ4_1 = scalar_kernel<Q4_1>(), kQ5_0 = scalar_kernel<Q5_0>(),
                 kQ5_1 = scalar_kernel<Q5_1>(), kQ8_0 = scalar_kernel<Q8_0>(), kMxfp4 = scalar_kernel<Mxfp4>(),
                 kQ2_K = scalar_kernel<Q2_K>(), kQ3_K = scalar_kernel<Q3_K>(), kQ4_K = scalar_kernel<QK4<false>>(),
                 kQ5_K = scalar_kernel<QK4<true>>(), kQ6_K = scalar_kernel<Q6_K>();

}  // namespace

void to_code_order(CodeOrder order, const int8_t* x, int64_t k, int8_t* out) {
  int64_t i = 0;
  if (order == CodeOrder::NibbleQuads) {
    for (; i + 128 <= k; i += 128) {
      for (int b = 0; b < 4; ++b) {
        std::memcpy(out + i + 16 * b, x + i + 32 * b, 16);
        std::memcpy(out + i + 64 + 16 * b, x + i + 32 * b + 16, 16);
      }
    }
  }
  std::memcpy(out + i, x + i, static_cast<size_t>(k - i));
}

int64_t act_block(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4: return 32;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return 256;
    default: return 0;
  }
}

K3_GGML_KERNEL_TABLE(find_kernel_scalar)

const Kernel* find_kernel(GgmlType type, CpuIsa isa) {
  const Kernel* k = nullptr;
  if (isa == CpuIsa::Avx512) k = find_kernel_avx512(type);
  if (k == nullptr && (isa == CpuIsa::Avx512 || isa == CpuIsa::Avx2)) k = find_kernel_avx2(type);
  return k != nullptr ? k : find_kernel_scalar(type);
}

}  // namespace k3::cpu::ggml
