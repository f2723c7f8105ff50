#include "grammar/grammar_ir.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace k3::grammar {

Expr empty() { return Expr{}; }

Expr lit(std::string_view utf8) {
  if (utf8.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::kLiteral;
  e.text = utf8;
  return e;
}

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate) {
  std::vector<CodeRange> cut;  // without surrogates, clamped to the scalar values
  for (CodeRange r : ranges) {
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > r.hi) continue;
    if (r.lo < 0xD800 && r.hi > 0xDFFF) {
      cut.push_back({r.lo, 0xD7FF});
      cut.push_back({0xE000, r.hi});
    } else if (r.lo >= 0xD800 && r.hi <= 0xDFFF) {
      continue;
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      cut.push_back({0xE000, r.hi});
    } else if (r.hi >= 0xD800 && r.hi <= 0xDFFF) {
      cut.push_back({r.lo, 0xD7FF});
    } else {
      cut.push_back(r);
    }
  }
  std::sort(cut.begin(), cut.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  std::vector<CodeRange> merged;
  for (CodeRange r : cut) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  // Ranges that touch only across the surrogate gap are adjacent among scalar values.
  std::vector<CodeRange> out;
  for (CodeRange r : merged) {
    if (!out.empty() && out.back().hi == 0xD7FF && r.lo == 0xE000) {
      out.back().hi = r.hi;
    } else {
      out.push_back(r);
    }
  }
  if (!negate) return out;
  std::vector<CodeRange> comp;
  char32_t next = 0;
  for (CodeRange r : out) {
    if (r.lo > next) comp.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
  return normalize_ranges(std::move(comp), false);
}

Expr cls(std::vector<CodeRange> ranges, bool negate) {
  Expr e;
  e.kind = Expr::Kind::kClass;
  e.ranges = normalize_ranges(std::move(ranges), negate);
  if (e.ranges.empty()) throw Error("character class matches no character");
  return e;
}

Expr any_char() { return cls({{0, kMaxCodePoint}}); }

Expr rule_ref(std::string_view name) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.text = name;
  return e;
}

Expr special(std::string_view name) {
  Expr e;
  e.kind = Expr::Kind::kSpecial;
  e.text = name;
  return e;
}

Expr seq(std::vector<Expr> items) {
  Expr e;
  auto push = [&e](Expr item) {
    if (item.kind == Expr::Kind::kLiteral && !e.items.empty() && e.items.back().kind == Expr::Kind::kLiteral) {
      e.items.back().text += item.text;
    } else {
      e.items.push_back(std::move(item));
    }
  };
  for (Expr& item : items) {
    if (item.kind == Expr::Kind::kSeq) {
      for (Expr& inner : item.items) push(std::move(inner));
    } else {
      push(std::move(item));
    }
  }
  if (e.items.size() == 1) return std::move(e.items[0]);
  return e;
}

Expr alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kAlt;
  for (Expr& item : items) {
    if (item.kind == Expr::Kind::kAlt) {
      for (Expr& inner : item.items) e.items.push_back(std::move(inner));
    } else {
      e.items.push_back(std::move(item));
    }
  }
  return e;
}

Expr repeat(Expr item, uint32_t min, uint32_t max) {
  if (max == 0) return empty();
  if (min == 1 && max == 1) return item;
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.items.push_back(std::move(item));
  return e;
}

bool is_rule_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const Rule* Grammar::find(std::string_view name) const {
  for (const Rule& r : rules)
    if (r.name == name) return &r;
  return nullptr;
}

void Grammar::add(std::string name, Expr body, bool shared) {
  if (find(name)) throw Error("grammar rule '" + name + "' is defined twice");
  rules.push_back({std::move(name), std::move(body), shared});
}

namespace {

void put_escaped(std::string& out, char32_t cp, bool in_class) {
  char buf[16];
  if (cp == '\n') {
    out += "\\n";
  } else if (cp == '\r') {
    out += "\\r";
  } else if (cp == '\t') {
    out += "\\t";
  } else if (cp == '\\' || (!in_class && cp == '"') || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
    out += buf;
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
    out += buf;
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
    out += buf;
  }
}

// Decodes one code point of valid UTF-8 (the IR's literals are valid UTF-8).
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i++]);
  if (b0 < 0x80) return b0;
  const int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
  char32_t cp = b0 & (0x3F >> n);
  for (int k = 0; k < n && i < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  return cp;
}

void print(const Expr& e, std::string& out, bool nested) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: {
      out += '"';
      for (size_t i = 0; i < e.text.size();) put_escaped(out, next_code_point(e.text, i), false);
      out += '"';
      return;
    }
    case Expr::Kind::kClass:
      out += '[';
      for (const CodeRange& r : e.ranges) {
        put_escaped(out, r.lo, true);
        if (r.hi != r.lo) {
          out += '-';
          put_escaped(out, r.hi, true);
        }
      }
      out += ']';
      return;
    case Expr::Kind::kRef:
    case Expr::Kind::kSpecial:
      out += e.text;
      return;
    case Expr::Kind::kSeq:
      if (e.items.empty()) {
        out += "\"\"";
        return;
      }
      if (nested) out += '(';
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i) out += ' ';
        print(e.items[i], out, e.items[i].kind == Expr::Kind::kAlt || e.items[i].kind == Expr::Kind::kSeq);
      }
      if (nested) out += ')';
      return;
    case Expr::Kind::kAlt:
      if (nested) out += '(';
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i) out += " | ";
        print(e.items[i], out, e.items[i].kind == Expr::Kind::kAlt);
      }
      if (nested) out += ')';
      return;
    case Expr::Kind::kRepeat: {
      const Expr& item = e.items[0];
      print(item, out, item.kind == Expr::Kind::kSeq || item.kind == Expr::Kind::kAlt || item.kind == Expr::Kind::kRepeat);
      if (e.min == 0 && e.max == 1) {
        out += '?';
      } else if (e.min == 0 && e.max == Expr::kUnbounded) {
        out += '*';
      } else if (e.min == 1 && e.max == Expr::kUnbounded) {
        out += '+';
      } else if (e.min == e.max) {
        out += '{' + std::to_string(e.min) + '}';
      } else if (e.max == Expr::kUnbounded) {
        out += '{' + std::to_string(e.min) + ",}";
      } else {
        out += '{' + std::to_string(e.min) + ',' + std::to_string(e.max) + '}';
      }
      return;
    }
  }
}

}  // namespace

std::string Grammar::to_gbnf() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name;
    out += " ::= ";
    print(r.body, out, false);
    out += '\n';
  }
  return out;
}

}  // namespace k3::grammar
