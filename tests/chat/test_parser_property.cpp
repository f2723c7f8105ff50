// Property test of both chat output parsers (tokenizer spec §5.8.8): seeded random and adversarial
// replies — well-formed ones mutated (tokens dropped, duplicated, inserted, the tail cut), and
// random sequences of tags — with markers split across tokens, unterminated calls, nested and
// unknown tags, attribute escapes, UTF-8 sequences split across tokens, invalid bytes and marker
// names spelled with ordinary tokens. For each: the same message and joined deltas for the whole
// text, a cut at every byte, one token at a time and random coalescings; valid UTF-8 in every
// field; no marker text in any field; a marker name spelled as text behaves as any other text; the
// spelled-out text through feed() gives the same as the ids.
#include <gtest/gtest.h>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "parser_harness.h"
#include "tokenizer/utf8.h"

namespace k3::chat::test {
namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  }
  size_t below(size_t n) { return n ? next() % n : 0; }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
};

// Ordinary text pieces. `spelled` adds marker names and fragments of them written as text.
std::string text_piece(Rng& g, bool spelled) {
  static const std::vector<std::string> plain = {
      "hello", " ", "\n", "\t", "Grüße", "中文", "😀", "\"q\"", "\\", "a&b", "&quot;", "&amp;", "{\"x\": 1}", "2.50",
      "true", "null", "[1, 2]", "think", "response", "call", "=\"", "\xFF", "\xC3", "\xE4\xB8", "  \n "};
  static const std::vector<std::string> marker_text = {"<|open|>", "<|close|>think<|sep|>", "<|sep|>", "<|end_of_msg|>",
                                                       "<|im_end|>", "<|tool_call_begin|>", "<|op", "en|>", "<", "|>", "<b>"};
  return spelled && g.chance(25) ? g.pick(marker_text) : g.pick(plain);
}

// Appends bytes as ordinary tokens of random length (a code point may span tokens).
void add_text(Reply& r, Rng& g, const std::string& bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = 1 + g.below(4);
    r.push_back(text(bytes.substr(i, n)));
    i += n;
  }
}

void add_random_text(Reply& r, Rng& g, bool spelled) {
  std::string s;
  for (size_t n = g.below(4); n > 0; --n) s += text_piece(g, spelled);
  add_text(r, g, s);
}

// ---- Kimi-K3 ----

void k3_open(Reply& r, Rng& g, const std::string& header) {
  r.push_back(mark(kO));
  add_text(r, g, header);
  if (!g.chance(3)) r.push_back(mark(kS));  // rarely a header is never ended
}
void k3_close(Reply& r, Rng& g, const std::string& name) {
  if (g.chance(10)) return;  // a close left out
  r.push_back(mark(kC));
  add_text(r, g, g.chance(5) ? " " + name + " " : name);
  r.push_back(mark(kS));
}

Reply k3_reply(Rng& g, bool thinking, bool spelled) {
  static const std::vector<std::string> tools = {"f", "get_weather", "a&quot;b", "x&amp;y", ""};
  static const std::vector<std::string> keys = {"city", "q", "k&quot;", "n"};
  static const std::vector<std::string> types = {"string", "number", "boolean", "null", "object", "array", "bogus", ""};
  Reply r;
  if (thinking) {
    add_random_text(r, g, spelled);
    if (g.chance(60)) k3_close(r, g, "think");
  }
  if (g.chance(70)) {
    if (thinking) k3_open(r, g, "response");
    add_random_text(r, g, spelled);
    if (g.chance(20)) {
      k3_open(r, g, g.chance(50) ? "em" : "note x=\"1\"");
      add_random_text(r, g, spelled);
      k3_close(r, g, "em");
    }
    k3_close(r, g, "response");
  }
  if (g.chance(50)) {
    if (g.chance(50)) add_text(r, g, "\n");
    k3_open(r, g, "tools");
    for (size_t c = g.below(3) + 1; c > 0; --c) {
      k3_open(r, g, "call tool=\"" + g.pick(tools) + "\" index=\"" + std::to_string(c) + "\"");
      if (g.chance(20)) {
        k3_open(r, g, "json type=\"object\"");
        add_text(r, g, g.chance(50) ? "{\"raw\": [1, \"two\"]}" : "");
        k3_close(r, g, "json");
      }
      for (size_t a = g.below(3); a > 0; --a) {
        k3_open(r, g, "argument key=\"" + g.pick(keys) + "\" type=\"" + g.pick(types) + "\"");
        add_random_text(r, g, spelled);
        k3_close(r, g, "argument");
      }
      k3_close(r, g, "call");
    }
    k3_close(r, g, "tools");
  }
  if (g.chance(20)) add_random_text(r, g, spelled);  // text outside channels
  if (g.chance(70)) k3_close(r, g, "message");
  if (g.chance(70)) r.push_back(mark(kE));
  return r;
}

// ---- Kimi-Linear ----

enum { kImEnd, kSectionBegin, kSectionEnd, kCallBegin, kArgumentBegin, kCallEnd };

Reply kimi_linear_reply(Rng& g, bool, bool spelled) {
  Reply r;
  add_random_text(r, g, spelled);
  if (g.chance(60)) {
    r.push_back(mark(kSectionBegin));
    for (size_t c = g.below(3) + 1; c > 0; --c) {
      if (g.chance(30)) add_text(r, g, "\n");
      r.push_back(mark(kCallBegin));
      add_text(r, g, g.chance(80) ? " functions.get_weather:" + std::to_string(c) : "");
      r.push_back(mark(kArgumentBegin));
      add_random_text(r, g, spelled);
      if (!g.chance(10)) r.push_back(mark(kCallEnd));
    }
    if (!g.chance(10)) r.push_back(mark(kSectionEnd));
  }
  if (g.chance(70)) r.push_back(mark(kImEnd));
  return r;
}

// ---- mutations and chaos ----

Reply mutate(Reply r, Rng& g, size_t markers, bool spelled) {
  for (size_t n = g.below(4); n > 0 && !r.empty(); --n) {
    const size_t at = g.below(r.size());
    switch (g.below(4)) {
      case 0: r.erase(r.begin() + static_cast<std::ptrdiff_t>(at)); break;
      case 1: r.insert(r.begin() + static_cast<std::ptrdiff_t>(at), r[at]); break;
      case 2: r.insert(r.begin() + static_cast<std::ptrdiff_t>(at), mark(static_cast<int>(g.below(markers)))); break;
      default: r.insert(r.begin() + static_cast<std::ptrdiff_t>(at), text(text_piece(g, spelled))); break;
    }
  }
  if (g.chance(30)) r.resize(g.below(r.size() + 1));  // cut short
  return r;
}

Reply chaos(Rng& g, size_t markers, bool spelled) {
  static const std::vector<std::string> words = {"think", "response", "tools", "call tool=\"f\"", "argument key=\"k\" type=\"string\"",
                                                 "argument key=\"n\" type=\"number\"", "json", "message", "em", " "};
  Reply r;
  for (size_t n = g.below(30); n > 0; --n) {
    if (g.chance(40)) {
      r.push_back(mark(static_cast<int>(g.below(markers))));
    } else if (g.chance(50)) {
      add_text(r, g, g.pick(words));
    } else {
      add_random_text(r, g, spelled);
    }
  }
  return r;
}

// Every marker name in text pieces replaced by a placeholder of the same character classes
// (non-space, no JSON escapes, not a word character at either end), and back.
std::string placeholder(size_t m) { return "@" + std::to_string(m) + "@"; }
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

struct Format {
  const char* name;
  std::function<std::unique_ptr<OutputParser>(bool thinking)> make;
  std::vector<std::string> markers;
  std::function<Reply(Rng&, bool thinking, bool spelled)> reply;
};

void check(const Format& f, const Reply& r, bool thinking, bool ended, bool spelled, Rng& g) {
  const MakeParser make = [&] { return f.make(thinking); };
  const Parsed whole = run_tokens(make, r, {}, ended);
  const std::string where = std::string(f.name) + ": " + spell(r, f.markers);
  ASSERT_EQ(whole.message, whole.joined) << where;
  const size_t n = text_bytes(r);
  ASSERT_EQ(run_tokens(make, r, every_offset(n), ended), whole) << where;
  ASSERT_EQ(run_tokens(make, r, token_offsets(r), ended), whole) << where;
  for (int round = 0; round < 4; ++round) {
    std::set<size_t> tokens, bytes;
    for (size_t c : token_offsets(r))
      if (g.chance(50)) tokens.insert(c);
    for (size_t c = 0; c < n; ++c)
      if (g.chance(10)) bytes.insert(c);
    ASSERT_EQ(run_tokens(make, r, tokens, ended), whole) << where;
    ASSERT_EQ(run_tokens(make, r, bytes, ended), whole) << where;
  }
  // Fields: valid UTF-8, never marker text.
  const Json& m = whole.message;
  std::vector<std::string> fields;
  for (const char* k : {"content", "reasoning_content"})
    if (m.contains(k) && m[k].is_string()) fields.push_back(m[k].get<std::string>());
  if (m.contains("tool_calls"))
    for (const Json& c : m["tool_calls"]) {
      fields.push_back(c["function"]["name"].get<std::string>());
      fields.push_back(c["function"]["arguments"].get<std::string>());
    }
  for (const std::string& s : fields) {
    ASSERT_EQ(utf8::first_invalid(s), std::string::npos) << where;
    if (!spelled) ASSERT_EQ(s.find("<|"), std::string::npos) << where;
    if (!spelled) ASSERT_EQ(s.find("|>"), std::string::npos) << where;
  }
  const std::string spelled_out = spell(r, f.markers);
  if (spelled) {
    // Marker names written as text are text: renaming them changes nothing else.
    Reply renamed = r;
    for (Token& t : renamed)
      for (size_t k = 0; k < f.markers.size(); ++k) t.text = replace_all(t.text, f.markers[k], placeholder(k));
    std::string back = run_tokens(make, renamed, {}, ended).message.dump();
    for (size_t k = 0; k < f.markers.size(); ++k) back = replace_all(back, placeholder(k), f.markers[k]);
    ASSERT_EQ(back, m.dump()) << where;
  } else {
    // Without marker text in the text, the spelled-out form reads the same as the ids.
    ASSERT_EQ(run_text(make, spelled_out, {}, ended), whole) << where;
  }
  // Text through feed(): the same for every split (a partial marker at a chunk's end waits).
  const Parsed text_whole = run_text(make, spelled_out, {}, ended);
  ASSERT_EQ(text_whole.message, text_whole.joined) << where;
  ASSERT_EQ(run_text(make, spelled_out, every_offset(spelled_out.size()), ended), text_whole) << where;
  std::set<size_t> cuts;
  for (size_t c = 0; c < spelled_out.size(); ++c)
    if (g.chance(15)) cuts.insert(c);
  ASSERT_EQ(run_text(make, spelled_out, cuts, ended), text_whole) << where;
}

void run_property(const Format& f, uint64_t seed, int replies) {
  Rng g{seed};
  for (int i = 0; i < replies; ++i) {
    const bool thinking = g.chance(50), ended = g.chance(30), spelled = g.chance(30);
    const Reply r = g.chance(25) ? chaos(g, f.markers.size(), spelled)
                                 : mutate(f.reply(g, thinking, spelled), g, f.markers.size(), spelled);
    check(f, r, thinking, ended, spelled, g);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ParserProperty, KimiK3) {
  const Format f{"k3", [](bool thinking) { return std::make_unique<K3OutputParser>(thinking); }, K3OutputParser::markers(),
                 k3_reply};
  run_property(f, 1, 1500);
}

TEST(ParserProperty, KimiLinear) {
  const Format f{"kimi-linear", [](bool) { return std::make_unique<KimiLinearOutputParser>(); },
                 KimiLinearOutputParser::markers(), kimi_linear_reply};
  run_property(f, 2, 800);
}

}  // namespace
}  // namespace k3::chat::test
