// Grammar IR → FlatGrammar (flat_grammar.h).
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "grammar/flat_grammar.h"

namespace k3::grammar {

void analyze_flat_grammar(FlatGrammar& g);  // flat_analysis.cpp

namespace {

using Kind = FlatGrammar::Kind;
using Element = FlatGrammar::Element;
using Alt = std::vector<Element>;

constexpr size_t kInlineLimit = 2048;       // elements of a rule inlined at every use
constexpr size_t kMaxElements = 4'000'000;  // after lowering
constexpr size_t kCopyLimit = 64;           // items of a counted repetition copied per repetition

class Lowerer {
 public:
  explicit Lowerer(const Grammar& g) : g_(g) {
    for (const Rule& r : g.rules) by_name_[r.name] = &r;
    plan_inlining();
  }

  FlatGrammar run() {
    const uint32_t start = new_rule("start");
    const uint32_t root = named_id(g_.root);
    rules_[start].alts = {Alt{{Kind::kRef, root}}};
    while (!pending_.empty()) {
      const Rule* r = pending_.back();
      pending_.pop_back();
      context_ = r->name;
      counter_ = 0;
      const uint32_t id = rule_ids_.at(r->name);
      std::vector<Alt> alts;
      if (r->body.kind == Expr::Kind::kAlt) {
        for (const Expr& item : r->body.items) alts.push_back(lower_alt(item));
      } else {
        alts.push_back(lower_alt(r->body));
      }
      rules_[id].alts = std::move(alts);
    }
    return layout(start);
  }

 private:
  struct PendingRule {
    std::string name;
    std::vector<Alt> alts;
  };

  // Which named rules are inlined: those not on a reference cycle whose inlined size is small.
  void plan_inlining() {
    enum { kNew, kActive, kDone };
    std::unordered_map<std::string, int> state;
    std::unordered_set<std::string> recursive;
    std::vector<std::string> stack;
    std::function<void(const Rule&)> visit = [&](const Rule& r) {
      state[r.name] = kActive;
      stack.push_back(r.name);
      std::function<void(const Expr&)> walk = [&](const Expr& e) {
        if (e.kind == Expr::Kind::kRef) {
          const auto it = by_name_.find(e.text);
          if (it == by_name_.end()) throw Error("grammar: undefined rule '" + e.text + "'");
          const int s = state[e.text];
          if (s == kActive) {
            for (auto i = stack.rbegin(); i != stack.rend(); ++i) {
              recursive.insert(*i);
              if (*i == e.text) break;
            }
          } else if (s == kNew) {
            visit(*it->second);
          }
        }
        for (const Expr& item : e.items) walk(item);
      };
      walk(r.body);
      stack.pop_back();
      state[r.name] = kDone;
    };
    for (const Rule& r : g_.rules)
      if (state[r.name] == kNew) visit(r);
    recursive_ = std::move(recursive);
    for (const Rule& r : g_.rules) {
      if (r.name == g_.root || r.shared || recursive_.count(r.name)) continue;
      if (expr_size(r.body) <= kInlineLimit) inline_.insert(r.name);
    }
  }

  // Elements an expression lowers to, roughly (a reference to a rule that stays a rule counts 1).
  size_t expr_size(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.text.size();
      case Expr::Kind::kClass: return e.ranges.back().hi < 0x80 ? 1 : 24;
      case Expr::Kind::kSpecial: return 1;
      case Expr::Kind::kRef: {
        if (recursive_.count(e.text) || by_name_.at(e.text)->shared) return 1;
        auto it = sizes_.find(e.text);
        if (it == sizes_.end()) it = sizes_.emplace(e.text, expr_size(by_name_.at(e.text)->body)).first;
        return it->second <= kInlineLimit ? it->second : 1;
      }
      case Expr::Kind::kRepeat: return expr_size(e.items[0]) + 4;
      default: {
        size_t n = 1;
        for (const Expr& item : e.items) n += expr_size(item) + 1;
        return n;
      }
    }
  }

  uint32_t new_rule(std::string name) {
    rules_.push_back({std::move(name), {}});
    return static_cast<uint32_t>(rules_.size() - 1);
  }
  uint32_t anon_rule() { return new_rule(context_ + "/" + std::to_string(++counter_)); }

  uint32_t named_id(const std::string& name) {
    const auto it = rule_ids_.find(name);
    if (it != rule_ids_.end()) return it->second;
    const uint32_t id = new_rule(name);
    rule_ids_[name] = id;
    pending_.push_back(by_name_.at(name));
    return id;
  }

  uint32_t byte_set(const ByteSet& s) {
    const auto [it, added] = set_ids_.emplace(s.w, static_cast<uint32_t>(sets_.size()));
    if (added) sets_.push_back(s);
    return it->second;
  }
  Element bytes(const ByteSet& s) { return {Kind::kBytes, byte_set(s)}; }

  void add(Alt& out, Element e) {
    if (++total_ > kMaxElements)
      throw Error("grammar too large: more than " + std::to_string(kMaxElements) + " elements after expansion");
    out.push_back(e);
  }

  Alt lower_alt(const Expr& e) {
    Alt a;
    lower_into(e, a);
    return a;
  }

  void lower_into(const Expr& e, Alt& out) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        for (unsigned char c : e.text) {
          ByteSet s;
          s.set(c);
          add(out, bytes(s));
        }
        return;
      case Expr::Kind::kClass:
        add(out, class_element(e.ranges));
        return;
      case Expr::Kind::kRef:
        if (inline_.count(e.text)) {
          lower_into(by_name_.at(e.text)->body, out);
        } else {
          add(out, {Kind::kRef, named_id(e.text)});
        }
        return;
      case Expr::Kind::kSpecial: {
        uint32_t idx = 0;
        while (idx < specials_.size() && specials_[idx] != e.text) ++idx;
        if (idx == specials_.size()) {
          if (specials_.size() == FlatGrammar::kMaxSpecials)
            throw Error("grammar uses more than " + std::to_string(FlatGrammar::kMaxSpecials) + " special tokens");
          specials_.push_back(e.text);
        }
        add(out, {Kind::kSpecial, idx});
        return;
      }
      case Expr::Kind::kSeq:
        for (const Expr& item : e.items) lower_into(item, out);
        return;
      case Expr::Kind::kAlt: {
        const uint32_t id = anon_rule();
        std::vector<Alt> alts;
        for (const Expr& item : e.items) alts.push_back(lower_alt(item));
        rules_[id].alts = std::move(alts);
        add(out, {Kind::kRef, id});
        return;
      }
      case Expr::Kind::kRepeat:
        lower_repeat(e, out);
        return;
    }
  }

  Element class_element(const std::vector<CodeRange>& ranges) {
    ByteSet ascii;
    bool has_ascii = false;
    for (const CodeRange& r : ranges) {
      if (r.lo < 0x80) {
        ascii.set_range(r.lo, std::min<char32_t>(r.hi, 0x7F));
        has_ascii = true;
      }
    }
    if (ranges.back().hi < 0x80) return bytes(ascii);
    const uint32_t id = anon_rule();
    std::vector<Alt> alts;
    if (has_ascii) alts.push_back({bytes(ascii)});
    for (const CodeRange& r : ranges) {
      if (r.hi < 0x80) continue;
      for (const auto& seq : utf8_sequences(std::max<char32_t>(r.lo, 0x80), r.hi)) {
        Alt a;
        for (const ByteRange& br : seq) {
          ByteSet s;
          s.set_range(br.lo, br.hi);
          add(a, bytes(s));
        }
        alts.push_back(std::move(a));
      }
    }
    rules_[id].alts = std::move(alts);
    return {Kind::kRef, id};
  }

  // The item of a counted repetition as one element: itself when it lowers to one, else a rule.
  Element single_element(const Expr& item) {
    Alt a = lower_alt(item);
    if (a.size() == 1) return a[0];
    const uint32_t id = anon_rule();
    rules_[id].alts = {std::move(a)};
    return {Kind::kRef, id};
  }

  void lower_repeat(const Expr& e, Alt& out) {
    const Expr& item = e.items[0];
    const uint32_t m = e.min, n = e.max;
    if (m == 0 && n == 1) {  // O ::= x | ε
      const uint32_t id = anon_rule();
      Alt a = lower_alt(item);
      rules_[id].alts = {std::move(a), Alt{}};
      add(out, {Kind::kRef, id});
      return;
    }
    if (m <= 1 && n == Expr::kUnbounded) {
      const uint32_t id = anon_rule();
      Alt a = lower_alt(item);
      if (m == 0) {  // S ::= x S | ε
        a.push_back({Kind::kRef, id});
        rules_[id].alts = {std::move(a), Alt{}};
      } else {  // P ::= x T ; T ::= P | ε
        const uint32_t tail = anon_rule();
        rules_[tail].alts = {Alt{{Kind::kRef, id}}, Alt{}};
        a.push_back({Kind::kRef, tail});
        rules_[id].alts = {std::move(a)};
      }
      add(out, {Kind::kRef, id});
      return;
    }
    if (n != Expr::kUnbounded && n > m && expr_size(item) <= kCopyLimit) {
      // Small items: a copy per repetition, so every copy returns to one place. The levels of the
      // optional part are built alike (L_0 ::= ε; L_k ::= x L_k-1 | ε) so that compile can treat
      // the levels deeper than any token as one (FlatGrammar::Chain).
      for (uint32_t i = 0; i < m; ++i) lower_into(item, out);
      uint32_t below = anon_rule();
      rules_[below].alts = {Alt{}};
      uint32_t first = 0, second = 0;
      for (uint32_t k = 1; k <= n - m; ++k) {
        const uint32_t id = anon_rule();
        Alt a = lower_alt(item);
        add(a, {Kind::kRef, below});
        rules_[id].alts = {std::move(a), Alt{}};
        if (k == 1) first = id;
        if (k == 2) second = id;
        below = id;
      }
      if (n - m >= 3) chains_.push_back({first, second - first, n - m});
      add(out, {Kind::kRef, below});
      return;
    }
    const Element x = single_element(item);
    for (uint32_t i = 0; i < m; ++i) add(out, x);
    if (n == Expr::kUnbounded) {
      const uint32_t id = anon_rule();
      rules_[id].alts = {Alt{x, {Kind::kRef, id}}, Alt{}};
      add(out, {Kind::kRef, id});
      return;
    }
    if (n == m) return;
    uint32_t below = 0;
    bool have_below = false;
    for (uint32_t k = 1; k <= n - m; ++k) {  // L_k ::= x L_{k-1} | ε
      const uint32_t id = anon_rule();
      Alt a{x};
      if (have_below) a.push_back({Kind::kRef, below});
      total_ += a.size();
      rules_[id].alts = {std::move(a), Alt{}};
      below = id;
      have_below = true;
    }
    if (total_ > kMaxElements)
      throw Error("grammar too large: more than " + std::to_string(kMaxElements) + " elements after expansion");
    add(out, {Kind::kRef, below});
  }

  FlatGrammar layout(uint32_t start) {
    FlatGrammar f;
    f.byte_sets = sets_;
    f.specials = specials_;
    f.start_rule = start;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      f.rule_names.push_back(rules_[r].name);
      f.alt_index.push_back(static_cast<uint32_t>(f.alts.size()));
      for (const Alt& a : rules_[r].alts) {
        f.alts.push_back(static_cast<uint32_t>(f.elements.size()));
        for (const Element& e : a) {
          f.elements.push_back(e);
          f.rule_of.push_back(r);
        }
        f.elements.push_back({Kind::kEnd, 0});
        f.rule_of.push_back(r);
      }
    }
    f.alt_index.push_back(static_cast<uint32_t>(f.alts.size()));
    f.start_pos = f.alts[f.alt_index[start]];
    // Chains, from rule ids to positions; levels laid out at a constant stride only.
    for (const FlatGrammar::Chain& c : chains_) {
      if (c.first + size_t{c.levels - 1} * c.stride >= rules_.size()) continue;
      const uint32_t first_pos = f.alts[f.alt_index[c.first]];
      const uint32_t stride = f.alts[f.alt_index[c.first + c.stride]] - first_pos;
      bool uniform = true;
      for (uint32_t k = 0; k < c.levels && uniform; ++k)
        uniform = f.alts[f.alt_index[c.first + k * c.stride]] == first_pos + k * stride;
      if (uniform) f.chains.push_back({first_pos, stride, c.levels});
    }
    analyze_flat_grammar(f);
    return f;
  }

  const Grammar& g_;
  std::unordered_map<std::string, const Rule*> by_name_;
  std::unordered_set<std::string> inline_;
  std::unordered_set<std::string> recursive_;
  std::unordered_map<std::string, size_t> sizes_;
  std::vector<FlatGrammar::Chain> chains_;  // as rule ids until layout
  std::unordered_map<std::string, uint32_t> rule_ids_;
  std::vector<const Rule*> pending_;
  std::vector<PendingRule> rules_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::vector<std::string> specials_;
  std::string context_ = "start";
  uint32_t counter_ = 0;
  size_t total_ = 0;
};

}  // namespace

FlatGrammar lower_grammar(const Grammar& grammar) {
  if (!grammar.find(grammar.root)) throw Error("grammar: no rule named '" + grammar.root + "'");
  return Lowerer(grammar).run();
}

}  // namespace k3::grammar
