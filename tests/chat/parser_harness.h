// Test driver for the chat output parsers: a reply as tokens (a marker by index, or ordinary
// bytes), fed with its text split at chosen byte offsets (a split at every token boundary is one
// token at a time; fewer splits coalesce tokens), or spelled out as text; the message and what a
// client joining the deltas holds.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "chat/stream_text.h"

namespace k3::chat::test {

struct Token {
  int marker = -1;   // ≥ 0: markers()[marker]
  std::string text;  // ordinary bytes (marker < 0)
};
using Reply = std::vector<Token>;
using MakeParser = std::function<std::unique_ptr<OutputParser>()>;

// The Kimi-K3 format's marker indices: <|open|> <|close|> <|sep|> <|end_of_msg|>.
enum K3Marker { kO, kC, kS, kE };

inline Token mark(int index) { return {index, ""}; }
inline Token text(std::string bytes) { return {-1, std::move(bytes)}; }

// Tokens from text with the marker names spelled out (each name one marker token, the text
// between them one token).
inline Reply tokens_of(std::string_view spelled, const std::vector<std::string>& names) {
  Reply r;
  std::string run;
  for (size_t p = 0; p < spelled.size();) {
    int found = -1;
    for (size_t m = 0; m < names.size(); ++m)
      if (spelled.substr(p, names[m].size()) == names[m]) found = static_cast<int>(m);
    if (found < 0) {
      run += spelled[p++];
      continue;
    }
    if (!run.empty()) r.push_back(text(std::move(run)));
    run.clear();
    r.push_back(mark(found));
    p += names[found].size();
  }
  if (!run.empty()) r.push_back(text(std::move(run)));
  return r;
}

inline std::string spell(const Reply& r, const std::vector<std::string>& names) {
  std::string s;
  for (const Token& t : r) s += t.marker >= 0 ? names[t.marker] : t.text;
  return s;
}

// A client's view: joins deltas by call index, checking that a call starts (id and name) exactly
// once, at the next index, before its arguments.
struct Joined {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  void add(const ChatDelta& d) {
    reasoning += d.reasoning_content;
    content += d.content;
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty()) {
        EXPECT_EQ(c.index, calls.size());
        calls.push_back({c.id, c.name, ""});
      }
      ASSERT_LT(c.index, calls.size());
      calls[c.index].arguments += c.arguments;
    }
  }
  Json to_json() const {
    ParsedMessage m;
    if (!reasoning.empty()) m.reasoning_content = reasoning;
    if (!content.empty()) m.content = content;
    m.tool_calls = calls;
    return m.to_json();
  }
};

struct Parsed {
  Json message;  // parser.message().to_json()
  Json joined;   // the deltas joined
  std::string finish_reason;
  std::vector<bool> complete;  // per call
  bool operator==(const Parsed&) const = default;
};

// Only a cut leaves a call incomplete, and only the last one.
inline Parsed finish_run(OutputParser& p, Joined& j, bool ended) {
  j.add(p.finish(ended));
  const ParsedMessage& m = p.message();
  Parsed out{m.to_json(), j.to_json(), m.finish_reason, {}};
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    out.complete.push_back(m.tool_calls[i].complete);
    if (!m.tool_calls[i].complete) EXPECT_TRUE(i + 1 == m.tool_calls.size() && m.finish_reason == "length");
  }
  return out;
}

// Feeds the tokens by piece (text()/marker(), as ids are fed), the ordinary text cut at the byte
// offsets in `cuts` (offsets into all ordinary bytes joined); text between cuts goes in one call.
inline Parsed run_tokens(const MakeParser& make, const Reply& r, const std::set<size_t>& cuts, bool ended = false) {
  const auto p = make();
  Joined j;
  size_t offset = 0;
  std::string pending;
  auto flush = [&] {
    if (!pending.empty()) j.add(p->text(pending));
    pending.clear();
  };
  for (const Token& t : r) {
    if (t.marker >= 0) {
      flush();
      j.add(p->marker(static_cast<size_t>(t.marker)));
      continue;
    }
    for (char c : t.text) {
      if (cuts.count(offset)) flush();
      pending += c;
      ++offset;
    }
  }
  flush();
  return finish_run(*p, j, ended);
}

// Feeds spelled-out text through feed(), cut at the byte offsets in `cuts`.
inline Parsed run_text(const MakeParser& make, std::string_view s, const std::set<size_t>& cuts, bool ended = false) {
  const auto p = make();
  Joined j;
  size_t from = 0;
  for (size_t c : cuts) {
    if (c <= from || c >= s.size()) continue;
    j.add(p->feed(s.substr(from, c - from)));
    from = c;
  }
  j.add(p->feed(s.substr(from)));
  return finish_run(*p, j, ended);
}

inline std::set<size_t> every_offset(size_t n) {
  std::set<size_t> s;
  for (size_t i = 0; i < n; ++i) s.insert(i);
  return s;
}

inline size_t text_bytes(const Reply& r) {
  size_t n = 0;
  for (const Token& t : r) n += t.text.size();
  return n;
}

// The token boundaries of the ordinary text (one token at a time).
inline std::set<size_t> token_offsets(const Reply& r) {
  std::set<size_t> s;
  size_t n = 0;
  for (const Token& t : r) {
    if (t.marker >= 0) continue;
    s.insert(n);
    n += t.text.size();
  }
  return s;
}

// The parse of `r` fed whole, and the same for every chunking: each single cut, a cut at every
// byte, one token at a time. Returns the whole parse; the message always equals the joined deltas.
inline Parsed expect_chunking_invariant(const MakeParser& make, const Reply& r, bool ended = false) {
  const Parsed whole = run_tokens(make, r, {}, ended);
  EXPECT_EQ(whole.message, whole.joined);
  const size_t n = text_bytes(r);
  for (size_t c = 1; c < n; ++c) EXPECT_EQ(run_tokens(make, r, {c}, ended), whole) << "cut at " << c;
  EXPECT_EQ(run_tokens(make, r, every_offset(n), ended), whole) << "every byte";
  EXPECT_EQ(run_tokens(make, r, token_offsets(r), ended), whole) << "one token at a time";
  return whole;
}

}  // namespace k3::chat::test
