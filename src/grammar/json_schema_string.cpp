#include "core/error.h"
#include "grammar/json_schema_detail.h"
#include "grammar/regex.h"
#include "tokenizer/utf8.h"

namespace k3::grammar::schema_detail {
namespace {

Expr hex_digit() { return cls({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }
Expr lower_hex(uint32_t n) { return repeat(cls({{'0', '9'}, {'a', 'f'}}), n, n); }
Expr digit() { return cls({{'0', '9'}}); }
Expr digits(uint32_t n) { return repeat(digit(), n, n); }

// The escape text of a character that cannot stand for itself in a JSON string, else "".
std::string escape_of(char32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20) {
    static const char* hex = "0123456789abcdef";
    return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
  }
  return "";
}

const std::vector<CodeRange>& plain_chars() {
  static const std::vector<CodeRange> plain = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
  return plain;
}

Expr two_digit(char32_t first_lo, char32_t first_hi, char32_t second_hi) {
  return seq({cls({{first_lo, first_hi}}), cls({{'0', second_hi}})});
}

Expr date_body() {
  const Expr year = digits(4);
  const Expr day31 = alt({seq({lit("0"), cls({{'1', '9'}})}), seq({cls({{'1', '2'}}), digit()}), seq({lit("3"), cls({{'0', '1'}})})});
  const Expr day30 = alt({seq({lit("0"), cls({{'1', '9'}})}), seq({cls({{'1', '2'}}), digit()}), lit("30")});
  const Expr day28 = alt({seq({lit("0"), cls({{'1', '9'}})}), seq({lit("1"), digit()}), seq({lit("2"), cls({{'0', '8'}})})});
  const Expr long_month = alt({seq({lit("0"), cls({{'1', '1'}, {'3', '3'}, {'5', '5'}, {'7', '8'}})}), seq({lit("1"), cls({{'0', '0'}, {'2', '2'}})})});
  const Expr short_month = alt({seq({lit("0"), cls({{'4', '4'}, {'6', '6'}, {'9', '9'}})}), lit("11")});
  return seq({year, lit("-"),
              alt({seq({long_month, lit("-"), day31}), seq({short_month, lit("-"), day30}), seq({lit("02-"), day28})})});
}

Expr time_body() {
  const Expr hour = alt({two_digit('0', '1', '9'), seq({lit("2"), cls({{'0', '3'}})})});
  const Expr minute = two_digit('0', '5', '9');
  const Expr fraction = opt(seq({lit("."), repeat(digit(), 1, 9)}));
  const Expr offset = alt({lit("Z"), seq({cls({{'+', '+'}, {'-', '-'}}), hour, lit(":"), minute})});
  return seq({hour, lit(":"), minute, lit(":"), minute, fraction, offset});
}

Expr email_body() {
  const Expr atom = plus(cls({{'!', '!'}, {'#', '\''}, {'*', '+'}, {'-', '-'}, {'/', '9'}, {'=', '='}, {'?', '?'},
                              {'A', 'Z'}, {'^', '~'}}));
  const Expr alnum = cls({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}});
  const Expr label = seq({alnum, opt(seq({star(cls({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'-', '-'}})), alnum}))});
  return seq({atom, star(seq({lit("."), atom})), lit("@"), plus(seq({label, lit(".")})), label});
}

Expr ipv4_body() {
  const Expr octet = alt({seq({lit("25"), cls({{'0', '5'}})}), seq({lit("2"), cls({{'0', '4'}}), digit()}),
                          seq({lit("1"), digit(), digit()}), seq({cls({{'1', '9'}}), digit()}), digit()});
  return seq({octet, lit("."), octet, lit("."), octet, lit("."), octet});
}

Expr quoted(Expr body) { return seq({lit("\""), std::move(body), lit("\"")}); }

}  // namespace

Expr json_string_char() {
  const Expr hex4 = alt({seq({cls({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}), hex_digit(), hex_digit(), hex_digit()}),
                         seq({cls({{'D', 'D'}, {'d', 'd'}}), cls({{'0', '7'}}), hex_digit(), hex_digit()})});
  return alt({cls(plain_chars()), seq({lit("\\"), alt({cls({{'"', '"'}, {'/', '/'}, {'\\', '\\'}, {'b', 'b'}, {'f', 'f'},
                                                            {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                                       seq({lit("u"), hex4})})})});
}

Expr json_string(uint32_t min, uint32_t max) { return quoted(repeat(json_string_char(), min, max)); }

Expr json_format_string(std::string_view format) {
  if (format == "date") return quoted(date_body());
  if (format == "time") return quoted(time_body());
  if (format == "date-time") return quoted(seq({date_body(), lit("T"), time_body()}));
  if (format == "uuid")
    return quoted(seq({lower_hex(8), lit("-"), lower_hex(4), lit("-"), lower_hex(4), lit("-"), lower_hex(4), lit("-"), lower_hex(12)}));
  if (format == "email") return quoted(email_body());
  if (format == "ipv4") return quoted(ipv4_body());
  throw Error("unsupported format '" + std::string(format) + "' (supported: date, time, date-time, uuid, email, ipv4)");
}

Expr encode_json_string_body(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: {
      std::string out;
      for (size_t i = 0; i < e.text.size();) {
        const char32_t cp = utf8::next(e.text, i);
        const std::string esc = escape_of(cp);
        if (esc.empty()) {
          utf8::append(out, cp);
        } else {
          out += esc;
        }
      }
      return lit(out);
    }
    case Expr::Kind::kClass: {
      std::vector<Expr> alts;
      std::vector<CodeRange> plain;
      for (const CodeRange& r : e.ranges) {
        for (const CodeRange& p : plain_chars()) {
          const char32_t lo = std::max(r.lo, p.lo), hi = std::min(r.hi, p.hi);
          if (lo <= hi) plain.push_back({lo, hi});
        }
        for (char32_t cp = r.lo; cp <= std::min<char32_t>(r.hi, '\\'); ++cp)
          if (!escape_of(cp).empty()) alts.push_back(lit(escape_of(cp)));
      }
      if (!plain.empty()) alts.insert(alts.begin(), cls(plain));
      return alt(std::move(alts));
    }
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt:
    case Expr::Kind::kRepeat: {
      Expr out = e;
      for (Expr& item : out.items) item = encode_json_string_body(item);
      return out;
    }
    default:
      return e;
  }
}

Expr json_pattern_string(std::string_view pattern) {
  RegexExpr re = parse_regex(pattern);
  std::vector<Expr> parts;
  if (!re.anchored_start) parts.push_back(star(json_string_char()));
  parts.push_back(encode_json_string_body(re.expr));
  if (!re.anchored_end) parts.push_back(star(json_string_char()));
  return quoted(seq(std::move(parts)));
}

}  // namespace k3::grammar::schema_detail
