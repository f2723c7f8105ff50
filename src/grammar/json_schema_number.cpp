#include <algorithm>

#include "core/error.h"
#include "grammar/json_schema_detail.h"

namespace k3::grammar::schema_detail {
namespace {

Expr digit_run(uint32_t n) { return repeat(cls({{'0', '9'}}), n, n); }

// Decimal strings of equal length between x and y (x ≤ y), digit by digit.
Expr same_length(const std::string& x, const std::string& y) {
  if (x.size() == 1) return cls({{static_cast<char32_t>(x[0]), static_cast<char32_t>(y[0])}});
  const std::string rx = x.substr(1), ry = y.substr(1);
  if (x[0] == y[0]) return seq({lit(x.substr(0, 1)), same_length(rx, ry)});
  const size_t n = rx.size();
  const bool x_low = rx == std::string(n, '0'), y_high = ry == std::string(n, '9');
  const char lo_mid = x_low ? x[0] : static_cast<char>(x[0] + 1);
  const char hi_mid = y_high ? y[0] : static_cast<char>(y[0] - 1);
  std::vector<Expr> alts;
  if (!x_low) alts.push_back(seq({lit(x.substr(0, 1)), same_length(rx, std::string(n, '9'))}));
  if (lo_mid <= hi_mid) alts.push_back(seq({cls({{static_cast<char32_t>(lo_mid), static_cast<char32_t>(hi_mid)}}), digit_run(static_cast<uint32_t>(n))}));
  if (!y_high) alts.push_back(seq({lit(y.substr(0, 1)), same_length(std::string(n, '0'), ry)}));
  return alt(std::move(alts));
}

// Non-negative integers in [a, b] without leading zeros.
Expr uint_range(int64_t a, int64_t b) {
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  std::vector<Expr> alts;
  int64_t pow = 1;
  for (size_t i = 1; i < sa.size(); ++i) pow *= 10;  // 10^(len(a)-1)
  for (size_t len = sa.size(); len <= sb.size(); ++len, pow *= 10) {
    const int64_t lo = len == sa.size() ? a : pow;
    const int64_t hi = len == sb.size() ? b : pow * 10 - 1;
    alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return alt(std::move(alts));
}

std::pair<int64_t, int64_t> clamp_bounds(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t l = lo.value_or(-kMaxGeneratedInteger), h = hi.value_or(kMaxGeneratedInteger);
  if (l > kMaxGeneratedInteger) throw Error("minimum " + std::to_string(l) + " is beyond the 16-digit numbers generated");
  if (h < -kMaxGeneratedInteger) throw Error("maximum " + std::to_string(h) + " is beyond the 16-digit numbers generated");
  if (l > h) throw Error("no number lies between the minimum and the maximum");
  return {std::max(l, -kMaxGeneratedInteger), std::min(h, kMaxGeneratedInteger)};
}

// Magnitudes in [a, b]: an integer part in [a, b-1] with any fraction, or b itself.
Expr magnitude_range(int64_t a, int64_t b) {
  const Expr fraction = opt(seq({lit("."), repeat(cls({{'0', '9'}}), 1, 16)}));
  std::vector<Expr> alts;
  if (a <= b - 1) alts.push_back(seq({uint_range(a, b - 1), fraction}));
  alts.push_back(uint_range(b, b));
  return alt(std::move(alts));
}

}  // namespace

Expr json_integer(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const auto [l, h] = clamp_bounds(lo, hi);
  std::vector<Expr> alts;
  if (h >= 0) alts.push_back(uint_range(std::max<int64_t>(l, 0), h));
  if (l < 0) alts.push_back(seq({lit("-"), uint_range(std::max<int64_t>(h < 0 ? -h : 1, 1), -l)}));
  return alt(std::move(alts));
}

Expr json_number(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (!lo && !hi) {
    const Expr integer = alt({lit("0"), seq({cls({{'1', '9'}}), repeat(cls({{'0', '9'}}), 0, 15)})});
    const Expr fraction = opt(seq({lit("."), repeat(cls({{'0', '9'}}), 1, 16)}));
    const Expr exponent = opt(seq({cls({{'E', 'E'}, {'e', 'e'}}), opt(cls({{'+', '+'}, {'-', '-'}})), repeat(cls({{'0', '9'}}), 1, 2)}));
    return seq({opt(lit("-")), integer, fraction, exponent});
  }
  const auto [l, h] = clamp_bounds(lo, hi);
  std::vector<Expr> alts;
  if (h >= 0) alts.push_back(magnitude_range(std::max<int64_t>(l, 0), h));
  if (l < 0) alts.push_back(seq({lit("-"), magnitude_range(h < 0 ? -h : 0, -l)}));
  return alt(std::move(alts));
}

}  // namespace k3::grammar::schema_detail
