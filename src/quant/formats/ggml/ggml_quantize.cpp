#include "quant/formats/ggml/ggml_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/numeric.h"

namespace k3 {
namespace {

constexpr int kQK = 256;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = encode_f16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// The value an fp16 field will hold when read back.
float as_f16(float v) { return decode_f16(encode_f16(v)); }

int round_clamp(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }

// The element of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float best = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  }
  return best;
}

// ---- sub-block fits ------------------------------------------------------------------------

// x ≈ scale·q − min with q in [0, nmax], scale ≥ 0, min ≥ 0 (GGML's mins are subtracted and the
// range always includes 0). Start from the min/max range, refine once by least squares.
struct AffineFit {
  float scale = 0.0f;
  float min = 0.0f;
};
AffineFit fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi == lo) return {0.0f, -lo};
  auto error_of = [&](const AffineFit& f, int* q) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      q[i] = f.scale > 0.0f ? round_clamp((x[i] + f.min) / f.scale, 0, nmax) : 0;
      const float d = f.scale * q[i] - f.min - x[i];
      err += d * d;
    }
    return err;
  };
  int q[32];
  AffineFit best{(hi - lo) / nmax, -lo};
  float best_err = error_of(best, q);
  // Least squares of x = a·q + b over the current q, with b ≤ 0 (min ≥ 0).
  double sq = 0, sqq = 0, sx = 0, sxq = 0;
  for (int i = 0; i < n; ++i) {
    sq += q[i];
    sqq += double(q[i]) * q[i];
    sx += x[i];
    sxq += double(x[i]) * q[i];
  }
  const double det = n * sqq - sq * sq;
  if (det > 0) {
    double a = (n * sxq - sq * sx) / det;
    double b = (sx - a * sq) / n;
    if (b > 0) {
      b = 0;
      a = sxq / sqq;
    }
    if (a > 0) {
      const AffineFit refined{static_cast<float>(a), static_cast<float>(-b)};
      int q2[32];
      const float err = error_of(refined, q2);
      if (err < best_err) best = refined;
    }
  }
  return best;
}

// x ≈ scale·q with q in [-nneg, nneg-1]: the largest magnitude maps to -nneg (the wider side),
// then one least-squares refinement of the scale.
float fit_symmetric(const float* x, int n, int nneg) {
  const float peak = signed_absmax(x, n);
  if (peak == 0.0f) return 0.0f;
  auto error_of = [&](float s) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float d = s * round_clamp(x[i] / s, -nneg, nneg - 1) - x[i];
      err += d * d;
    }
    return err;
  };
  float best = peak / -static_cast<float>(nneg);
  double sxq = 0, sqq = 0;
  for (int i = 0; i < n; ++i) {
    const int q = round_clamp(x[i] / best, -nneg, nneg - 1);
    sxq += double(x[i]) * q;
    sqq += double(q) * q;
  }
  if (sqq > 0) {
    const float refined = static_cast<float>(sxq / sqq);
    if (refined != 0.0f && error_of(refined) < error_of(best)) best = refined;
  }
  return best;
}

// Quantizes sub-block values against their final (super-block quantized) scale.
int quant_affine(float x, float scale, float min, int nmax) {
  return scale > 0.0f ? round_clamp((x + min) / scale, 0, nmax) : 0;
}
int quant_symmetric(float x, float scale, int nneg) {
  return scale != 0.0f ? round_clamp(x / scale, -nneg, nneg - 1) : 0;
}

// Super-block quantization of unsigned sub-block scales/mins to `levels` steps of an fp16 unit.
struct UnsignedScales {
  float unit = 0.0f;  // as read back from fp16
  int q[16] = {};
};
UnsignedScales quantize_unsigned(const float* v, int count, int levels) {
  UnsignedScales s;
  const float peak = *std::max_element(v, v + count);
  if (peak <= 0.0f) return s;
  const float unit = peak / levels;
  for (int j = 0; j < count; ++j) s.q[j] = round_clamp(v[j] / unit, 0, levels);
  s.unit = as_f16(unit);
  return s;
}

// Super-block quantization of signed sub-block scales to [-levels, levels-1] steps.
UnsignedScales quantize_signed(const float* v, int count, int levels) {
  UnsignedScales s;
  const float peak = signed_absmax(v, count);
  if (peak == 0.0f) return s;
  const float unit = peak / -static_cast<float>(levels);
  for (int j = 0; j < count; ++j) s.q[j] = round_clamp(v[j] / unit, -levels, levels - 1);
  s.unit = as_f16(unit);
  return s;
}

// ---- blocks --------------------------------------------------------------------------------

void block_q8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int i = 0; i < 32; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(round_clamp(x[i] * id, -127, 127)));
}

void block_q4_0(const float* x, uint8_t* out) {
  const float d = signed_absmax(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::clamp(static_cast<int>(x[j] * id + 8.5f), 0, 15);
    const int hi = std::clamp(static_cast<int>(x[j + 16] * id + 8.5f), 0, 15);
    out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Q5_0, 22 bytes: f16 d; u8 qh[4] (bit j = 5th bit of element j); u8 qs[16] (low nibbles of
// elements j and j + 16). w = d·(q − 16), d = signed absmax / −16.
void block_q5_0(const float* x, uint8_t* out) {
  const float d = signed_absmax(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::clamp(static_cast<int>(x[j] * id + 16.5f), 0, 31);
    const int hi = std::clamp(static_cast<int>(x[j + 16] * id + 16.5f), 0, 31);
    out[6 + j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) out[2 + i] = static_cast<uint8_t>(qh >> (8 * i));
}

// Q2_K: scales[16] (lo nibble scale, hi nibble min), qs[64], d, dmin. Element y of the block:
// sub-block y/16, byte qs[32·(y/128) + y%32], bit pair 2·((y%128)/32).
void block_q2_k(const float* x, uint8_t* out) {
  float scale[16], min[16];
  for (int j = 0; j < 16; ++j) {
    const AffineFit f = fit_affine(x + 16 * j, 16, 3);
    scale[j] = f.scale;
    min[j] = f.min;
  }
  const UnsignedScales sc = quantize_unsigned(scale, 16, 15);
  const UnsignedScales mn = quantize_unsigned(min, 16, 15);
  uint8_t* scales = out;
  uint8_t* qs = out + 16;
  std::memset(qs, 0, 64);
  for (int j = 0; j < 16; ++j) scales[j] = static_cast<uint8_t>(sc.q[j] | (mn.q[j] << 4));
  for (int y = 0; y < kQK; ++y) {
    const int j = y / 16;
    const int q = quant_affine(x[y], sc.unit * sc.q[j], mn.unit * mn.q[j], 3);
    qs[32 * (y / 128) + y % 32] |= static_cast<uint8_t>(q << (2 * ((y % 128) / 32)));
  }
  put_f16(out + 80, sc.unit);
  put_f16(out + 82, mn.unit);
}

// Q3_K: hmask[32], qs[64], scales[12] (16 six-bit scales biased by 32), d. Element y: q+4 = u in
// [0,7]; low 2 bits in qs[32·(y/128) + y%32] at bit pair 2·((y%128)/32); bit 2 in hmask[y%32] at
// bit y/32.
void block_q3_k(const float* x, uint8_t* out) {
  float scale[16];
  for (int j = 0; j < 16; ++j) scale[j] = fit_symmetric(x + 16 * j, 16, 4);
  const UnsignedScales sc = quantize_signed(scale, 16, 32);
  uint8_t* hmask = out;
  uint8_t* qs = out + 32;
  uint8_t* scales = out + 96;
  std::memset(out, 0, 108);
  for (int j = 0; j < 16; ++j) {
    const int biased = sc.q[j] + 32;
    if (j < 8) {
      scales[j] |= static_cast<uint8_t>(biased & 0xF);
    } else {
      scales[j - 8] |= static_cast<uint8_t>((biased & 0xF) << 4);
    }
    scales[8 + j % 4] |= static_cast<uint8_t>((biased >> 4) << (2 * (j / 4)));
  }
  for (int y = 0; y < kQK; ++y) {
    const int u = quant_symmetric(x[y], sc.unit * sc.q[y / 16], 4) + 4;
    qs[32 * (y / 128) + y % 32] |= static_cast<uint8_t>((u & 3) << (2 * ((y % 128) / 32)));
    if (u & 4) hmask[y % 32] |= static_cast<uint8_t>(1u << (y / 32));
  }
  put_f16(out + 108, sc.unit);
}

// Q4_K: d, dmin, scales[12] (8 six-bit scales and mins), qs[128]. Element y: sub-block y/32,
// nibble of qs[32·(y/64) + y%32], low for the first 32 of each 64.
void block_q4_k(const float* x, uint8_t* out) {
  float scale[8], min[8];
  for (int j = 0; j < 8; ++j) {
    const AffineFit f = fit_affine(x + 32 * j, 32, 15);
    scale[j] = f.scale;
    min[j] = f.min;
  }
  const UnsignedScales sc = quantize_unsigned(scale, 8, 63);
  const UnsignedScales mn = quantize_unsigned(min, 8, 63);
  uint8_t* s = out + 4;
  uint8_t* qs = out + 16;
  std::memset(s, 0, 12 + 128);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc.q[j] | ((sc.q[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn.q[j] | ((mn.q[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc.q[j + 4] & 0xF) | ((mn.q[j + 4] & 0xF) << 4));
  }
  for (int y = 0; y < kQK; ++y) {
    const int j = y / 32;
    const int q = quant_affine(x[y], sc.unit * sc.q[j], mn.unit * mn.q[j], 15);
    qs[32 * (y / 64) + y % 32] |= static_cast<uint8_t>(q << ((y % 64) < 32 ? 0 : 4));
  }
  put_f16(out, sc.unit);
  put_f16(out + 2, mn.unit);
}

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Element y = 128h + 32k + l: u = q+32 in [0,63];
// low nibble in ql[64h + l + 32·(k&1)] (high half of the byte for k ≥ 2), top 2 bits in
// qh[32h + l] at bit pair 2k.
void block_q6_k(const float* x, uint8_t* out) {
  float scale[16];
  for (int j = 0; j < 16; ++j) scale[j] = fit_symmetric(x + 16 * j, 16, 32);
  const UnsignedScales sc = quantize_signed(scale, 16, 128);
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  std::memset(out, 0, 208);
  for (int j = 0; j < 16; ++j) out[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc.q[j]));
  for (int y = 0; y < kQK; ++y) {
    const int u = quant_symmetric(x[y], sc.unit * sc.q[y / 16], 32) + 32;
    const int h = y / 128, k = (y % 128) / 32, l = y % 32;
    ql[64 * h + l + 32 * (k & 1)] |= static_cast<uint8_t>((u & 0xF) << (k >= 2 ? 4 : 0));
    qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * k));
  }
  put_f16(out + 208, sc.unit);
}

using BlockFn = void (*)(const float*, uint8_t*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return block_q8_0;
    case GgmlType::Q4_0: return block_q4_0;
    case GgmlType::Q5_0: return block_q5_0;
    case GgmlType::Q2_K: return block_q2_k;
    case GgmlType::Q3_K: return block_q3_k;
    case GgmlType::Q4_K: return block_q4_k;
    case GgmlType::Q6_K: return block_q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool ggml_has_quantize(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_fn(type) != nullptr;
}

void quantize_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!ggml_has_quantize(type)) throw Error("no GGML quantizer for type " + std::string(info.name));
  if (n < 0 || n % info.block_size != 0) {
    throw Error("cannot quantize " + std::to_string(n) + " values to " + std::string(info.name) +
                ": not a whole number of blocks of " + std::to_string(info.block_size));
  }
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::F16 ? encode_f16(src[i]) : encode_bf16(src[i]);
        dst[2 * i] = static_cast<uint8_t>(h);
        dst[2 * i + 1] = static_cast<uint8_t>(h >> 8);
      }
      return;
    default: break;
  }
  const BlockFn fn = block_fn(type);
  for (int64_t b = 0; b < n / info.block_size; ++b) fn(src + b * info.block_size, dst + b * info.type_size);
}

std::vector<uint8_t> quantize_tensor(GgmlType type, std::span<const float> src, uint64_t row_length) {
  const uint64_t row_bytes = ggml_row_size(type, row_length);
  if (row_length == 0 || src.size() % row_length != 0) {
    throw Error("cannot quantize " + std::to_string(src.size()) + " values as rows of " + std::to_string(row_length));
  }
  const uint64_t rows = src.size() / row_length;
  std::vector<uint8_t> out(rows * row_bytes);
  // Rows quantize independently (every block of a row is its own), so any split gives the same bytes.
  constexpr uint64_t kRowsPerChunk = 64;
#pragma omp parallel for schedule(dynamic, 1) if (rows > kRowsPerChunk)
  for (int64_t first = 0; first < static_cast<int64_t>(rows); first += kRowsPerChunk) {
    const uint64_t count = std::min<uint64_t>(kRowsPerChunk, rows - static_cast<uint64_t>(first));
    quantize_row(type, src.data() + static_cast<uint64_t>(first) * row_length, out.data() + static_cast<uint64_t>(first) * row_bytes,
                 static_cast<int64_t>(count * row_length));
  }
  return out;
}

}  // namespace k3
