// Narrow number formats used by checkpoints and kernels: bf16, f16 (IEEE half), fp8 e4m3fn,
// fp8 e5m2, fp4 e2m1 and the ue8m0 power-of-two scale. Everything here is constexpr and
// header-only so that kernels can inline it; the 8-bit-and-smaller decoders are table lookups.
//
// Encode rules (float -> code). All rounding is round-to-nearest, ties to the even code, on the
// exact float input (no double rounding). The sign of the input, including -0.0, is kept unless a
// rule below says otherwise.
//   bf16          RNE; overflow -> ±inf; ±inf -> ±inf; NaN -> quiet NaN keeping sign and the top
//                 payload bits (quiet bit forced on).
//   f16           RNE incl. subnormals (smallest 2^-24); magnitudes that round above 65504 -> ±inf
//                 (so |x| >= 65520 -> inf); ±inf -> ±inf; NaN -> 0x7E00 (canonical quiet NaN).
//   e4m3fn_sat    RNE; saturating: every magnitude that rounds above 448, and ±inf, -> ±448
//                 (code 0x7E/0xFE), as a clamp-then-cast does; NaN -> 0x7F.
//   e5m2          IEEE-like: RNE; magnitudes that round above 57344 -> ±inf (|x| >= 61440);
//                 NaN -> 0x7E (canonical quiet NaN).
//   e5m2_sat      as e5m2, but finite overflow and ±inf -> ±57344 (code 0x7B/0xFB).
//   e2m1          grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign bit 3; RNE between grid values
//                 (e.g. 2.5 -> 2, 3.5 -> 4, 5 -> 4, 0.25 -> 0, 0.75 -> 1); saturating: |x| > 6 and
//                 ±inf -> ±6; NaN -> +6 (code 0x7). [UNCONFIRMED: the NaN rule follows the
//                 saturate-to-positive-max behaviour of the hardware FP4 conversion; no checkpoint
//                 depends on it.]
//   ue8m0         code e in 0..254 is 2^(e-127); 0xFF is NaN; no sign, no zero.
//                 _ceil:    smallest scale >= x (the MX/DeepGEMM "round up" used when a scale is
//                           derived from amax, so that amax/scale never exceeds the element range).
//                 _nearest: nearest scale in linear value; a tie (x = 1.5 * 2^k) goes to the
//                           larger scale.
//                 Both: x <= 2^-127, including 0 and negatives, -> 0x00; x above the largest scale
//                 and +inf -> 0xFE (saturate); NaN -> 0xFF.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

namespace k3 {

namespace numeric_detail {

// Layout of a sign-magnitude binary float: `mant_bits` stored fraction bits, exponent `bias`,
// exponent field 0 = zero/subnormal. Codes are sign | magnitude code.
struct Format {
  int width;              // total bits incl. sign
  int mant_bits;
  int bias;
  uint32_t max_finite;    // largest finite magnitude code
  uint32_t overflow_code; // magnitude code for results above max_finite and for ±inf
  uint32_t nan_code;      // full code (sign included) returned for NaN input
};

inline constexpr Format kF16{16, 10, 15, 0x7BFF, 0x7C00, 0x7E00};
inline constexpr Format kE4M3FNSat{8, 3, 7, 0x7E, 0x7E, 0x7F};
inline constexpr Format kE5M2{8, 2, 15, 0x7B, 0x7C, 0x7E};
inline constexpr Format kE5M2Sat{8, 2, 15, 0x7B, 0x7B, 0x7E};
inline constexpr Format kE2M1{4, 1, 1, 0x7, 0x7, 0x7};

constexpr float pow2(int k) {  // 2^k for k in [-126, 127]
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// Rounds a finite or infinite non-negative float (given as bits, sign cleared) to the magnitude
// code of a format with `mant_bits` fraction bits and exponent `bias`, ties to even. The exponent
// range is unbounded above: the result may exceed the format's largest code (±inf maps beyond
// every finite code); the caller applies its overflow rule.
constexpr uint32_t round_magnitude(uint32_t abs_bits, int mant_bits, int bias) {
  const int exp_field = static_cast<int>(abs_bits >> 23);
  uint32_t sig = abs_bits & 0x7FFFFF;  // significand as an integer, units of 2^(e-23)
  int e = -126;                         // exponent of bit 23 of sig
  if (exp_field != 0) {
    e = exp_field - 127;
    sig |= 0x800000;
  }
  const int min_e = 1 - bias;  // exponent of the smallest normal of the target
  const int eff_e = e > min_e ? e : min_e;
  // Drop the low `shift` bits of sig: the target's last mantissa bit has weight 2^(eff_e - mant_bits).
  const int shift = 23 - mant_bits + (eff_e - e);
  uint32_t n = 0;  // rounded significand in target units; 2^mant_bits <= n <= 2^(mant_bits+1) if normal
  if (shift <= 24) {
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rem = sig & ((half << 1) - 1);
    n = sig >> shift;
    if (rem > half || (rem == half && (n & 1u))) ++n;
  }  // shift > 24: sig < 2^24 < half an ulp -> 0
  // Subnormal range: code == n. Normal range: ((eff_e + bias) << mant_bits) + n - 2^mant_bits.
  // A carry out of the mantissa moves into the exponent field, which is the correct next code.
  return (static_cast<uint32_t>(eff_e + bias - 1) << mant_bits) + n;
}

constexpr uint32_t encode(float x, const Format& f) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return f.nan_code;
  uint32_t code = round_magnitude(abs_bits, f.mant_bits, f.bias);
  if (code > f.max_finite) code = f.overflow_code;
  return ((bits >> 31) << (f.width - 1)) | code;
}

// Value of a finite magnitude code (no sign, not inf/NaN).
constexpr float decode_magnitude(uint32_t code, int mant_bits, int bias) {
  const uint32_t exp_field = code >> mant_bits;
  const uint32_t m = code & ((1u << mant_bits) - 1);
  if (exp_field == 0) return static_cast<float>(m) * pow2(1 - bias - mant_bits);
  return std::bit_cast<float>(((exp_field - bias + 127) << 23) | (m << (23 - mant_bits)));
}

constexpr float with_sign(bool negative, float v) { return negative ? -v : v; }

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

constexpr std::array<float, 256> make_e4m3fn_table() {
  std::array<float, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t mag = b & 0x7F;
    t[b] = mag == 0x7F ? kNaN : with_sign(b & 0x80, decode_magnitude(mag, 3, 7));
  }
  return t;
}

constexpr std::array<float, 256> make_e5m2_table() {
  std::array<float, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t mag = b & 0x7F;
    t[b] = mag > 0x7C ? kNaN : with_sign(b & 0x80, mag == 0x7C ? kInf : decode_magnitude(mag, 2, 15));
  }
  return t;
}

constexpr std::array<float, 16> make_e2m1_table() {
  std::array<float, 16> t{};
  for (uint32_t c = 0; c < 16; ++c) t[c] = with_sign(c & 8, decode_magnitude(c & 7, 1, 1));
  return t;
}

constexpr std::array<float, 256> make_ue8m0_table() {
  std::array<float, 256> t{};
  t[0] = std::bit_cast<float>(0x00400000u);  // 2^-127 is a float subnormal
  for (int e = 1; e < 255; ++e) t[e] = pow2(e - 127);
  t[255] = kNaN;
  return t;
}

}  // namespace numeric_detail

// ---- decode tables (index = code) -------------------------------------------------------------
inline constexpr std::array<float, 256> kE4M3FNValues = numeric_detail::make_e4m3fn_table();
inline constexpr std::array<float, 256> kE5M2Values = numeric_detail::make_e5m2_table();
inline constexpr std::array<float, 16> kE2M1Values = numeric_detail::make_e2m1_table();
inline constexpr std::array<float, 256> kUE8M0Values = numeric_detail::make_ue8m0_table();

// Largest finite values.
inline constexpr float kE4M3FNMax = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kF16Max = 65504.0f;

// ---- bf16 --------------------------------------------------------------------------------------
constexpr float decode_bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

constexpr uint16_t encode_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Adding 0x7FFF plus the lsb of the kept half rounds to nearest even; a carry into the exponent
  // is the correct next value (up to inf).
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// ---- f16 (IEEE binary16) -----------------------------------------------------------------------
constexpr float decode_f16(uint16_t h) {
  const bool negative = h & 0x8000;
  const uint32_t mag = h & 0x7FFFu;
  if (mag >= 0x7C00) return mag == 0x7C00 ? numeric_detail::with_sign(negative, numeric_detail::kInf)
                                          : numeric_detail::kNaN;
  return numeric_detail::with_sign(negative, numeric_detail::decode_magnitude(mag, 10, 15));
}

constexpr uint16_t encode_f16(float x) {
  return static_cast<uint16_t>(numeric_detail::encode(x, numeric_detail::kF16));
}

// ---- fp8 e4m3fn (no inf; 0x7F/0xFF NaN; max 448) ----------------------------------------------
constexpr float decode_e4m3fn(uint8_t b) { return kE4M3FNValues[b]; }

constexpr uint8_t encode_e4m3fn_sat(float x) {
  return static_cast<uint8_t>(numeric_detail::encode(x, numeric_detail::kE4M3FNSat));
}

// ---- fp8 e5m2 (IEEE-like: 0x7C inf, 0x7D..0x7F NaN; max 57344) --------------------------------
constexpr float decode_e5m2(uint8_t b) { return kE5M2Values[b]; }

constexpr uint8_t encode_e5m2(float x) {
  return static_cast<uint8_t>(numeric_detail::encode(x, numeric_detail::kE5M2));
}

constexpr uint8_t encode_e5m2_sat(float x) {
  return static_cast<uint8_t>(numeric_detail::encode(x, numeric_detail::kE5M2Sat));
}

// ---- fp4 e2m1 (code in the low nibble; bit 3 = sign) ------------------------------------------
constexpr float decode_e2m1(uint8_t code) { return kE2M1Values[code & 0xF]; }

constexpr uint8_t encode_e2m1(float x) {
  return static_cast<uint8_t>(numeric_detail::encode(x, numeric_detail::kE2M1));
}

// ---- ue8m0 (unsigned power-of-two scale) -------------------------------------------------------
constexpr float decode_ue8m0(uint8_t e) { return kUE8M0Values[e]; }

namespace numeric_detail {
// Shared rules of the ue8m0 encoders. For a normal float x = 2^(exp_field-127) * (1 + mant/2^23),
// `round_up(mant)` says whether to take the next scale; subnormal floats (x < 2^-126) take code 1
// when mant >= subnormal_up_from, else code 0.
template <typename RoundUp>
constexpr uint8_t encode_ue8m0(float x, uint32_t subnormal_up_from, RoundUp round_up) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  if (bits >> 31) return 0x00;               // negatives and -0
  const uint32_t exp_field = bits >> 23;
  const uint32_t mant = bits & 0x7FFFFF;
  if (exp_field == 0) return mant >= subnormal_up_from ? 1 : 0;
  const uint32_t code = exp_field + round_up(mant);
  return static_cast<uint8_t>(code > 0xFE ? 0xFE : code);
}
}  // namespace numeric_detail

constexpr uint8_t encode_ue8m0_ceil(float x) {
  // Subnormal x > 2^-127 (mantissa > 0x400000) needs 2^-126.
  return numeric_detail::encode_ue8m0(x, 0x400001, [](uint32_t mant) { return mant != 0 ? 1u : 0u; });
}

constexpr uint8_t encode_ue8m0_nearest(float x) {
  // Between 2^k and 2^(k+1) the midpoint is 1.5 * 2^k (mantissa 0x400000); ties go up.
  return numeric_detail::encode_ue8m0(x, 0x600000, [](uint32_t mant) { return mant >= 0x400000 ? 1u : 0u; });
}

}  // namespace k3
