// Static analysis of a FlatGrammar: nullable / first sets per position, the fewest bytes that finish
// each position, what follows each rule, and the checks that make the automaton terminate (no left
// recursion, every rule can finish).
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "grammar/flat_grammar.h"

namespace k3::grammar {
namespace {

using Kind = FlatGrammar::Kind;
constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();

std::string display_name(const FlatGrammar& g, uint32_t rule) {
  const std::string& n = g.rule_names[rule];
  return n.substr(0, n.find('/'));
}

// Per-position facts, recomputed alternative by alternative from the per-rule facts until stable.
void compute_first(FlatGrammar& g) {
  const size_t n = g.elements.size(), nr = g.num_rules();
  g.first.assign(n, ByteSet{});
  g.first_specials.assign(n, 0);
  g.nullable.assign(n, 0);
  g.min_bytes.assign(n, kInf);
  std::vector<ByteSet> rule_first(nr);
  std::vector<uint64_t> rule_specials(nr, 0);
  std::vector<uint8_t> rule_nullable(nr, 0);
  std::vector<uint32_t> rule_min(nr, kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = static_cast<uint32_t>(nr); r-- > 0;) {
      ByteSet f;
      uint64_t sp = 0;
      uint8_t nul = 0;
      uint32_t mn = kInf;
      for (uint32_t a = g.alt_index[r]; a < g.alt_index[r + 1]; ++a) {
        uint32_t end = g.alts[a];
        while (g.elements[end].kind != Kind::kEnd) ++end;
        g.nullable[end] = 1;
        g.min_bytes[end] = 0;
        for (uint32_t p = end; p-- > g.alts[a];) {
          const auto& e = g.elements[p];
          ByteSet pf;
          uint64_t ps = 0;
          uint8_t pn = 0;
          uint32_t pm = kInf;
          const uint32_t next_min = g.min_bytes[p + 1];
          if (e.kind == Kind::kBytes) {
            pf = g.byte_sets[e.arg];
            pm = next_min == kInf ? kInf : next_min + 1;
          } else if (e.kind == Kind::kSpecial) {
            ps = uint64_t{1} << e.arg;
            pm = next_min == kInf ? kInf : next_min + 1;
          } else {
            pf = rule_first[e.arg];
            ps = rule_specials[e.arg];
            if (rule_nullable[e.arg]) {
              pf |= g.first[p + 1];
              ps |= g.first_specials[p + 1];
              pn = g.nullable[p + 1];
            }
            const uint32_t rm = rule_min[e.arg];
            pm = (rm == kInf || next_min == kInf) ? kInf : rm + next_min;
          }
          g.first[p] = pf;
          g.first_specials[p] = ps;
          g.nullable[p] = pn;
          g.min_bytes[p] = pm;
        }
        const uint32_t s = g.alts[a];
        f |= g.first[s];
        sp |= g.first_specials[s];
        nul |= g.nullable[s];
        mn = std::min(mn, g.min_bytes[s]);
      }
      if (!(f == rule_first[r]) || sp != rule_specials[r] || nul != rule_nullable[r] || mn != rule_min[r]) {
        rule_first[r] = f;
        rule_specials[r] = sp;
        rule_nullable[r] = nul;
        rule_min[r] = mn;
        changed = true;
      }
    }
  }
  // The innermost rule (the last made) is the one to name.
  for (uint32_t r = static_cast<uint32_t>(nr); r-- > 0;)
    if (rule_min[r] == kInf) throw Error("grammar rule '" + display_name(g, r) + "' can never finish");
}

// Left recursion: a rule reachable from itself through references preceded only by nullable parts.
void check_left_recursion(const FlatGrammar& g) {
  const uint32_t nr = static_cast<uint32_t>(g.num_rules());
  std::vector<uint8_t> rule_nullable(nr, 0);
  for (uint32_t r = 0; r < nr; ++r)
    for (uint32_t a = g.alt_index[r]; a < g.alt_index[r + 1]; ++a) rule_nullable[r] |= g.nullable[g.alts[a]];
  std::vector<std::vector<uint32_t>> edges(nr);
  for (uint32_t r = 0; r < nr; ++r) {
    for (uint32_t a = g.alt_index[r]; a < g.alt_index[r + 1]; ++a) {
      for (uint32_t p = g.alts[a]; g.elements[p].kind == Kind::kRef; ++p) {
        edges[r].push_back(g.elements[p].arg);
        if (!rule_nullable[g.elements[p].arg]) break;
      }
    }
  }
  enum : uint8_t { kNew, kActive, kDone };
  std::vector<uint8_t> state(nr, kNew);
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t root = 0; root < nr; ++root) {
    if (state[root] != kNew) continue;
    stack.push_back({root, 0});
    state[root] = kActive;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == edges[r].size()) {
        state[r] = kDone;
        stack.pop_back();
        continue;
      }
      const uint32_t s = edges[r][i++];
      if (state[s] == kActive) throw Error("grammar rule '" + display_name(g, s) + "' is left-recursive");
      if (state[s] == kNew) {
        state[s] = kActive;
        stack.push_back({s, 0});
      }
    }
  }
}

// exits: for rule r, the non-end positions that follow when r completes, through tail positions.
// Computed over the strongly connected components of "r returns to the end of rule s".
void compute_exits(FlatGrammar& g) {
  const uint32_t nr = static_cast<uint32_t>(g.num_rules());
  std::vector<std::vector<uint32_t>> direct(nr);  // non-end return positions
  std::vector<std::vector<uint32_t>> up(nr);      // rules whose end r returns to
  for (uint32_t p = 0; p < g.elements.size(); ++p) {
    if (g.elements[p].kind != Kind::kRef) continue;
    const uint32_t r = g.elements[p].arg;
    if (g.elements[p + 1].kind == Kind::kEnd) {
      up[r].push_back(g.rule_of[p]);
    } else {
      direct[r].push_back(p + 1);
    }
  }
  // Tarjan, iterative.
  std::vector<uint32_t> index(nr, kInf), low(nr, 0), comp(nr, kInf);
  std::vector<uint8_t> on_stack(nr, 0);
  std::vector<uint32_t> tstack;
  std::vector<std::pair<uint32_t, size_t>> call;
  std::vector<std::vector<uint32_t>> comp_exits;
  std::vector<uint8_t> comp_end;
  uint32_t counter = 0;
  for (uint32_t root = 0; root < nr; ++root) {
    if (index[root] != kInf) continue;
    call.push_back({root, 0});
    index[root] = low[root] = counter++;
    tstack.push_back(root);
    on_stack[root] = 1;
    while (!call.empty()) {
      auto& [r, i] = call.back();
      if (i < up[r].size()) {
        const uint32_t s = up[r][i++];
        if (index[s] == kInf) {
          index[s] = low[s] = counter++;
          tstack.push_back(s);
          on_stack[s] = 1;
          call.push_back({s, 0});
        } else if (on_stack[s]) {
          low[r] = std::min(low[r], index[s]);
        }
        continue;
      }
      const uint32_t done = r;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
      if (low[done] != index[done]) continue;
      // A component is complete; its successors (rules it returns into) are all finished already.
      const uint32_t c = static_cast<uint32_t>(comp_exits.size());
      std::vector<uint32_t> members;
      for (;;) {
        const uint32_t m = tstack.back();
        tstack.pop_back();
        on_stack[m] = 0;
        comp[m] = c;
        members.push_back(m);
        if (m == done) break;
      }
      std::vector<uint32_t> ex;
      uint8_t to_end = 0;
      for (uint32_t m : members) {
        if (m == g.start_rule) to_end = 1;
        ex.insert(ex.end(), direct[m].begin(), direct[m].end());
        for (uint32_t s : up[m]) {
          if (comp[s] == c) continue;
          ex.insert(ex.end(), comp_exits[comp[s]].begin(), comp_exits[comp[s]].end());
          to_end |= comp_end[comp[s]];
        }
      }
      std::sort(ex.begin(), ex.end());
      ex.erase(std::unique(ex.begin(), ex.end()), ex.end());
      comp_exits.push_back(std::move(ex));
      comp_end.push_back(to_end);
    }
  }
  g.exit_index.assign(1, 0);
  g.exits.clear();
  g.exits_to_end.assign(nr, 0);
  for (uint32_t r = 0; r < nr; ++r) {
    const auto& ex = comp_exits[comp[r]];
    g.exits.insert(g.exits.end(), ex.begin(), ex.end());
    g.exit_index.push_back(static_cast<uint32_t>(g.exits.size()));
    g.exits_to_end[r] = comp_end[comp[r]];
  }
}

}  // namespace

// context_rule: follow a rule's only return place while it is a tail position.
void compute_context_rules(FlatGrammar& g) {
  const uint32_t nr = static_cast<uint32_t>(g.num_rules());
  std::vector<uint32_t> sites(nr, 0), only(nr, kInf);
  for (uint32_t p = 0; p < g.elements.size(); ++p) {
    if (g.elements[p].kind != Kind::kRef) continue;
    ++sites[g.elements[p].arg];
    only[g.elements[p].arg] = p + 1;
  }
  g.context_rule.assign(nr, kInf);
  for (uint32_t r = 0; r < nr; ++r) {
    uint32_t c = r;
    for (uint32_t steps = 0; steps < nr && sites[c] == 1 && g.elements[only[c]].kind == Kind::kEnd; ++steps) {
      c = g.rule_of[only[c]];
      if (g.context_rule[c] != kInf) {
        c = g.context_rule[c];
        break;
      }
    }
    g.context_rule[r] = c;
  }
}

void analyze_flat_grammar(FlatGrammar& g) {
  compute_first(g);
  check_left_recursion(g);
  compute_exits(g);
  compute_context_rules(g);
}

}  // namespace k3::grammar
