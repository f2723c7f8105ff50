// Narrow number formats: every code of every format is decoded and compared with an independent
// ldexp-based definition; encoders are checked by round trip, at every midpoint between adjacent
// codes, and on random inputs against a brute-force nearest-code search.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.h"

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// ---- independent reference decoders (written from the format definitions) -------------------

// IEEE-style: exponent field all ones is inf (m == 0) or NaN.
double ref_ieee(uint32_t code, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const bool neg = (code >> (ebits + mbits)) & 1;
  const int e = static_cast<int>((code >> mbits) & ((1u << ebits) - 1));
  const uint32_t m = code & ((1u << mbits) - 1);
  double v;
  if (e == (1 << ebits) - 1) v = m == 0 ? kInf : kNaN;
  else if (e == 0) v = std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  else v = std::ldexp(static_cast<double>((1u << mbits) + m), e - bias - mbits);
  return neg ? -v : v;
}

double ref_e4m3fn(uint32_t b) {
  const bool neg = b & 0x80;
  const int e = (b >> 3) & 0xF;
  const int m = b & 7;
  double v;
  if ((b & 0x7F) == 0x7F) v = kNaN;
  else if (e == 0) v = std::ldexp(m, -9);
  else v = std::ldexp(8 + m, e - 10);
  return neg ? -v : v;
}

double ref_e2m1(uint32_t c) {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};  // quant spec §2.3 table
  return (c & 8) ? -grid[c & 7] : grid[c & 7];
}

double ref_ue8m0(uint32_t e) { return e == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(e) - 127); }

// Same value including the sign of zero; any NaN equals any NaN.
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// One format under test: its codes, reference decoder and the library's decode/encode.
struct Fmt {
  const char* name;
  int width;
  std::function<double(uint32_t)> ref;
  std::function<float(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
  bool overflow_to_inf;  // IEEE overflow; otherwise saturating
};

std::vector<Fmt> formats() {
  using namespace k3;
  return {
      {"bf16", 16, [](uint32_t c) { return ref_ieee(c, 8, 7); },
       [](uint32_t c) { return decode_bf16(static_cast<uint16_t>(c)); }, [](float x) -> uint32_t { return encode_bf16(x); },
       true},
      {"f16", 16, [](uint32_t c) { return ref_ieee(c, 5, 10); },
       [](uint32_t c) { return decode_f16(static_cast<uint16_t>(c)); }, [](float x) -> uint32_t { return encode_f16(x); },
       true},
      {"e4m3fn_sat", 8, ref_e4m3fn, [](uint32_t c) { return decode_e4m3fn(static_cast<uint8_t>(c)); },
       [](float x) -> uint32_t { return encode_e4m3fn_sat(x); }, false},
      {"e5m2", 8, [](uint32_t c) { return ref_ieee(c, 5, 2); },
       [](uint32_t c) { return decode_e5m2(static_cast<uint8_t>(c)); }, [](float x) -> uint32_t { return encode_e5m2(x); },
       true},
      {"e5m2_sat", 8, [](uint32_t c) { return ref_ieee(c, 5, 2); },
       [](uint32_t c) { return decode_e5m2(static_cast<uint8_t>(c)); },
       [](float x) -> uint32_t { return encode_e5m2_sat(x); }, false},
      {"e2m1", 4, ref_e2m1, [](uint32_t c) { return decode_e2m1(static_cast<uint8_t>(c)); },
       [](float x) -> uint32_t { return encode_e2m1(x); }, false},
  };
}

uint32_t sign_bit(const Fmt& f) { return 1u << (f.width - 1); }

// Finite non-negative codes in increasing value order (sign-magnitude: increasing code order).
std::vector<uint32_t> finite_positive_codes(const Fmt& f) {
  std::vector<uint32_t> out;
  for (uint32_t c = 0; c < sign_bit(f); ++c)
    if (std::isfinite(f.ref(c))) out.push_back(c);
  return out;
}

// |a - x| exactly, as hi + lo with hi = |a - x| rounded (TwoSum), so that distances from a far-away
// x compare correctly; plain double subtraction would make distant candidates tie.
struct Dist {
  double hi, lo;
  bool operator<(const Dist& o) const { return hi < o.hi || (hi == o.hi && lo < o.lo); }
  bool operator==(const Dist& o) const { return hi == o.hi && lo == o.lo; }
};
Dist distance(double a, double x) {
  const double s = a - x;
  const double t = s - a;
  const double err = (a - (s - t)) + (-x - t);
  return s < 0 ? Dist{-s, -err} : Dist{s, err};
}

// Brute force: the finite code nearest to x with x's sign, ties to the even code; with IEEE
// overflow, |x| at or beyond the midpoint above the largest finite value gives inf.
uint32_t brute_encode(const Fmt& f, const std::vector<uint32_t>& positive, float x) {
  const uint32_t sign = std::signbit(x) ? sign_bit(f) : 0;
  const double ax = std::fabs(static_cast<double>(x));
  if (f.overflow_to_inf) {
    const double top = f.ref(positive.back());
    const double ulp = top - f.ref(positive[positive.size() - 2]);
    if (ax >= top + ulp / 2) return sign | (positive.back() + 1);  // the inf code follows max
  }
  uint32_t best = positive[0];
  Dist best_d = distance(f.ref(best), ax);
  for (uint32_t c : positive) {
    const Dist d = distance(f.ref(c), ax);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

// ---- decode -------------------------------------------------------------------------------------

TEST(Numeric, DecodeEveryCodeMatchesReference) {
  for (const Fmt& f : formats()) {
    for (uint32_t c = 0; c < (1u << f.width); ++c)
      ASSERT_TRUE(same(f.decode(c), f.ref(c))) << f.name << " code " << c << " got " << f.decode(c);
  }
  for (uint32_t e = 0; e < 256; ++e)
    ASSERT_TRUE(same(k3::decode_ue8m0(static_cast<uint8_t>(e)), ref_ue8m0(e))) << "ue8m0 " << e;
}

TEST(Numeric, DecodeKnownValues) {
  EXPECT_EQ(k3::decode_e4m3fn(0x7E), 448.0f);
  EXPECT_EQ(k3::decode_e4m3fn(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(k3::decode_e4m3fn(0xFF)));
  EXPECT_EQ(k3::decode_e5m2(0x7B), 57344.0f);
  EXPECT_EQ(k3::decode_e5m2(0xFC), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(k3::decode_f16(0x3C00), 1.0f);
  EXPECT_EQ(k3::decode_f16(0x7BFF), 65504.0f);
  EXPECT_EQ(k3::decode_f16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(k3::decode_bf16(0x3F80), 1.0f);
  EXPECT_EQ(k3::decode_e2m1(0xF), -6.0f);
  EXPECT_EQ(k3::decode_ue8m0(127), 1.0f);
  EXPECT_EQ(k3::decode_ue8m0(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(k3::decode_ue8m0(254), std::ldexp(1.0f, 127));
  static_assert(k3::decode_e4m3fn(0x38) == 1.0f && k3::encode_e4m3fn_sat(1.0f) == 0x38);
  static_assert(k3::encode_f16(1.0f) == 0x3C00 && k3::decode_f16(0xC000) == -2.0f);
}

// ---- encode -------------------------------------------------------------------------------------

TEST(Numeric, EncodeOfDecodeIsIdentityForEveryNonNaNCode) {
  for (const Fmt& f : formats()) {
    for (uint32_t c = 0; c < (1u << f.width); ++c) {
      const double v = f.ref(c);
      if (std::isnan(v)) continue;
      const uint32_t expect = std::isinf(v) && !f.overflow_to_inf ? (c & sign_bit(f)) | finite_positive_codes(f).back() : c;
      ASSERT_EQ(f.encode(f.decode(c)), expect) << f.name << " code " << c;
    }
  }
  for (uint32_t e = 0; e < 255; ++e) {
    ASSERT_EQ(k3::encode_ue8m0_ceil(k3::decode_ue8m0(static_cast<uint8_t>(e))), e);
    ASSERT_EQ(k3::encode_ue8m0_nearest(k3::decode_ue8m0(static_cast<uint8_t>(e))), e);
  }
}

TEST(Numeric, EveryMidpointRoundsToEvenAndNeighboursRoundToTheirSide) {
  for (const Fmt& f : formats()) {
    const std::vector<uint32_t> pos = finite_positive_codes(f);
    for (size_t i = 0; i + 1 < pos.size(); ++i) {
      const uint32_t lo = pos[i], hi = pos[i + 1];
      const float mid = static_cast<float>((f.ref(lo) + f.ref(hi)) / 2);  // exact: one more bit
      ASSERT_EQ(static_cast<double>(mid), (f.ref(lo) + f.ref(hi)) / 2);
      const uint32_t even = (lo & 1) ? hi : lo;
      for (uint32_t sign : {0u, sign_bit(f)}) {
        const float s = sign ? -1.0f : 1.0f;
        ASSERT_EQ(f.encode(s * mid), sign | even) << f.name << " midpoint " << mid;
        ASSERT_EQ(f.encode(s * std::nextafter(mid, 0.0f)), sign | lo) << f.name << " below " << mid;
        ASSERT_EQ(f.encode(s * std::nextafter(mid, kInfF)), sign | hi) << f.name << " above " << mid;
      }
    }
  }
}

TEST(Numeric, OverflowSaturationAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  // e4m3fn: 464 is the midpoint 448|480 -> even 448; everything above saturates; inf too.
  EXPECT_EQ(k3::encode_e4m3fn_sat(464.0f), 0x7E);
  EXPECT_EQ(k3::encode_e4m3fn_sat(465.0f), 0x7E);
  EXPECT_EQ(k3::encode_e4m3fn_sat(1e30f), 0x7E);
  EXPECT_EQ(k3::encode_e4m3fn_sat(-1e30f), 0xFE);
  EXPECT_EQ(k3::encode_e4m3fn_sat(inf), 0x7E);
  EXPECT_EQ(k3::encode_e4m3fn_sat(-inf), 0xFE);
  // e5m2: 61440 is the midpoint above the max -> inf (IEEE); just below stays max.
  EXPECT_EQ(k3::encode_e5m2(61440.0f), 0x7C);
  EXPECT_EQ(k3::encode_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(k3::encode_e5m2(-inf), 0xFC);
  EXPECT_EQ(k3::encode_e5m2_sat(61440.0f), 0x7B);
  EXPECT_EQ(k3::encode_e5m2_sat(-inf), 0xFB);
  // f16
  EXPECT_EQ(k3::encode_f16(65520.0f), 0x7C00);
  EXPECT_EQ(k3::encode_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(k3::encode_f16(-1e10f), 0xFC00);
  EXPECT_EQ(k3::encode_f16(inf), 0x7C00);
  // bf16: the midpoint above the largest finite value rounds to inf.
  EXPECT_EQ(k3::encode_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(k3::encode_bf16(std::bit_cast<float>(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(k3::encode_bf16(-inf), 0xFF80);
  // e2m1 saturates at 6.
  EXPECT_EQ(k3::encode_e2m1(7.0f), 0x7);
  EXPECT_EQ(k3::encode_e2m1(-100.0f), 0xF);
  EXPECT_EQ(k3::encode_e2m1(-inf), 0xF);
}

TEST(Numeric, E2M1RoundsOnItsGrid) {
  const std::pair<float, uint8_t> cases[] = {
      {0.25f, 0x0}, {0.2500001f, 0x1}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4},
      {3.5f, 0x6},  {5.0f, 0x6},       {5.01f, 0x7}, {-2.5f, 0xC}, {-0.0f, 0x8},  {1e-30f, 0x0}};
  for (auto [x, code] : cases) EXPECT_EQ(k3::encode_e2m1(x), code) << x;
}

TEST(Numeric, NaNRules) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float neg_nan = -qnan;
  const float snan = std::bit_cast<float>(0x7F800001u);  // payload only in low bits
  for (float n : {qnan, neg_nan, snan}) {
    EXPECT_EQ(k3::encode_e4m3fn_sat(n), 0x7F);
    EXPECT_EQ(k3::encode_e5m2(n), 0x7E);
    EXPECT_EQ(k3::encode_e5m2_sat(n), 0x7E);
    EXPECT_EQ(k3::encode_f16(n), 0x7E00);
    EXPECT_EQ(k3::encode_e2m1(n), 0x7);
    EXPECT_EQ(k3::encode_ue8m0_ceil(n), 0xFF);
    EXPECT_EQ(k3::encode_ue8m0_nearest(n), 0xFF);
    EXPECT_TRUE(std::isnan(k3::decode_bf16(k3::encode_bf16(n))));
  }
  // bf16 keeps sign and top payload bits and forces the quiet bit (a signalling NaN whose payload
  // would be truncated away must not become inf).
  EXPECT_EQ(k3::encode_bf16(snan), 0x7FC0);
  EXPECT_EQ(k3::encode_bf16(neg_nan), 0xFFC0);
  EXPECT_EQ(k3::encode_bf16(std::bit_cast<float>(0x7FA50000u)), 0x7FE5);
}

TEST(Numeric, SubnormalsAndTinyInputs) {
  // f16 smallest subnormal 2^-24: half of it ties to 0, a little more rounds up.
  EXPECT_EQ(k3::encode_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(k3::encode_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(k3::encode_f16(-std::ldexp(3.0f, -25)), 0x8002);  // 1.5 ulp ties to even 2
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(k3::encode_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_EQ(k3::encode_e4m3fn_sat(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(k3::encode_e4m3fn_sat(std::ldexp(3.0f, -11)), 0x01);  // 0.75 ulp -> 2^-9
  EXPECT_EQ(k3::encode_e4m3fn_sat(std::ldexp(3.0f, -10)), 0x02);  // 1.5 ulp ties to even
  EXPECT_EQ(k3::encode_e4m3fn_sat(-std::ldexp(1.0f, -9)), 0x81);
  // Float subnormal inputs.
  const float tiny = std::bit_cast<float>(0x00000001u);
  EXPECT_EQ(k3::encode_e4m3fn_sat(tiny), 0x00);
  EXPECT_EQ(k3::encode_f16(-tiny), 0x8000);
  EXPECT_EQ(k3::encode_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // tie -> even
  EXPECT_EQ(k3::encode_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);
  EXPECT_EQ(k3::encode_bf16(std::bit_cast<float>(0x00008001u)), 0x0001);
}

TEST(Numeric, RandomInputsMatchBruteForce) {
  std::mt19937_64 rng(20260129);
  for (const Fmt& f : formats()) {
    const std::vector<uint32_t> pos = finite_positive_codes(f);
    const int lo_exp = std::ilogb(f.ref(1)) - 3;
    const int hi_exp = std::ilogb(f.ref(pos.back())) + 3;
    const int samples = f.width == 16 ? 1500 : 20000;
    for (int i = 0; i < samples; ++i) {
      const uint64_t r = rng();
      float x;
      if (i % 4 == 0) {
        x = std::bit_cast<float>(static_cast<uint32_t>(r));  // anywhere in float
        if (!std::isfinite(x)) continue;
      } else {  // concentrated on the format's range
        const int e = std::clamp(lo_exp + static_cast<int>((r >> 32) % static_cast<uint64_t>(hi_exp - lo_exp + 1)), -126, 127);
        const uint32_t bits = (static_cast<uint32_t>(r >> 63) << 31) | (static_cast<uint32_t>(e + 127) << 23) |
                              static_cast<uint32_t>(r & 0x7FFFFF);
        x = std::bit_cast<float>(bits);
      }
      ASSERT_EQ(f.encode(x), brute_encode(f, pos, x)) << f.name << " x=" << x << " bits " << std::hex
                                                       << std::bit_cast<uint32_t>(x);
    }
  }
}

// ---- ue8m0 --------------------------------------------------------------------------------------

// Brute force over the 255 scales: smallest scale >= x (saturating), and nearest with ties up.
uint8_t brute_ue8m0_ceil(float x) {
  for (uint32_t e = 0; e < 255; ++e)
    if (ref_ue8m0(e) >= x) return static_cast<uint8_t>(e);
  return 0xFE;
}
uint8_t brute_ue8m0_nearest(float x) {
  uint32_t best = 0;
  for (uint32_t e = 1; e < 255; ++e)
    if (!(distance(ref_ue8m0(best), x) < distance(ref_ue8m0(e), x))) best = e;
  return static_cast<uint8_t>(best);
}

TEST(Numeric, Ue8m0EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(k3::encode_ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(k3::encode_ue8m0_ceil(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(k3::encode_ue8m0_ceil(0.75f), 127);
  EXPECT_EQ(k3::encode_ue8m0_nearest(1.5f), 128);  // tie goes up
  EXPECT_EQ(k3::encode_ue8m0_nearest(std::nextafter(1.5f, 0.0f)), 127);
  EXPECT_EQ(k3::encode_ue8m0_nearest(0.74f), 126);
  for (float small : {0.0f, -0.0f, -1.0f, -inf, std::ldexp(1.0f, -127), std::ldexp(1.0f, -149)}) {
    EXPECT_EQ(k3::encode_ue8m0_ceil(small), 0) << small;
    EXPECT_EQ(k3::encode_ue8m0_nearest(small), 0) << small;
  }
  EXPECT_EQ(k3::encode_ue8m0_ceil(std::nextafter(std::ldexp(1.0f, -127), 1.0f)), 1);
  EXPECT_EQ(k3::encode_ue8m0_nearest(std::ldexp(3.0f, -128)), 1);
  EXPECT_EQ(k3::encode_ue8m0_ceil(std::numeric_limits<float>::max()), 0xFE);
  EXPECT_EQ(k3::encode_ue8m0_nearest(std::numeric_limits<float>::max()), 0xFE);
  EXPECT_EQ(k3::encode_ue8m0_ceil(inf), 0xFE);
  // MX use: scale for amax 5.9 and e2m1 max 6 must be >= amax/6.
  EXPECT_EQ(k3::encode_ue8m0_ceil(5.9f / 6.0f), 127);
}

TEST(Numeric, Ue8m0RandomInputsMatchBruteForce) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50000; ++i) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    if (i % 2) x = std::fabs(x);
    ASSERT_EQ(k3::encode_ue8m0_ceil(x), brute_ue8m0_ceil(x)) << x;
    ASSERT_EQ(k3::encode_ue8m0_nearest(x), brute_ue8m0_nearest(x)) << x;
  }
  for (uint32_t e = 0; e < 254; ++e) {  // every midpoint and its neighbours
    const float mid = static_cast<float>((ref_ue8m0(e) + ref_ue8m0(e + 1)) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInfF)}) {
      ASSERT_EQ(k3::encode_ue8m0_ceil(x), brute_ue8m0_ceil(x)) << x;
      ASSERT_EQ(k3::encode_ue8m0_nearest(x), brute_ue8m0_nearest(x)) << x;
    }
  }
}

}  // namespace
