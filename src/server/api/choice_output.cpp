#include "server/api/choice_output.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "chat/output_parsers.h"
#include "chat/token_pieces.h"
#include "tokenizer/utf8.h"

namespace k3::server {
namespace {

using chat::Json;

// A float logprob as the shortest decimal that reads back as that float (not the float's exact
// double expansion); -9999 for -inf, as OpenAI reports impossible tokens.
Json logprob_json(float v) {
  if (!std::isfinite(v)) return -9999.0;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

struct TokenEntry {
  size_t start = 0, end = 0;  // byte range of the token's text in the decoded output
  TokenLogprobs lp;
};

}  // namespace

ChoiceConfig choice_config(const CompletionRequest& request) {
  ChoiceConfig c;
  c.kind = OutputKind::kCompletion;
  c.stop = request.stop;
  c.stop_token_ids = request.gen.stop_token_ids;
  c.max_tokens = request.gen.max_tokens;
  c.top_logprobs = request.gen.top_logprobs;
  c.skip_special = request.skip_special_tokens;
  return c;
}

ChoiceConfig choice_config(const ChatCompletionRequest& request) {
  ChoiceConfig c;
  c.kind = request.k3_format ? OutputKind::kChatK3 : OutputKind::kChatKimiLinear;
  c.thinking = request.chat.thinking;
  c.call_id_prefix = request.call_id_prefix;
  c.stop = request.stop;
  c.stop_token_ids = request.gen.stop_token_ids;
  c.max_tokens = request.gen.max_tokens;
  c.top_logprobs = request.gen.top_logprobs;
  c.skip_special = request.skip_special_tokens;
  return c;
}

namespace {

std::unique_ptr<chat::OutputParser> make_parser(const ChoiceConfig& c) {
  if (c.kind == OutputKind::kCompletion) return nullptr;
  return chat::make_output_parser(c.kind == OutputKind::kChatK3, c.thinking, c.call_id_prefix);
}

SkipSpecial skip_of(const ChoiceConfig& c) { return c.skip_special ? SkipSpecial::kAll : SkipSpecial::kNone; }

}  // namespace

struct ChoiceOutput::State {
  State(const Tokenizer& t, ChoiceConfig c)
      : tokenizer(t),
        config(std::move(c)),
        parser(make_parser(config)),
        decoder(t, skip_of(config), parser ? parser->marker_names() : std::vector<std::string>()) {
    if (parser) pieces.emplace(t, parser->marker_names(), skip_of(config));
    for (const auto& s : config.stop) longest_stop = std::max(longest_stop, s.size());
  }

  const Tokenizer& tokenizer;
  ChoiceConfig config;
  std::unique_ptr<chat::OutputParser> parser;  // chat
  StreamDecoder decoder;
  std::optional<chat::TokenPieces> pieces;  // chat: which ids are the parser's markers
  size_t longest_stop = 0;

  std::string decoded;   // all decoded text (cut at a stop string)
  size_t released = 0;   // decoded[0, released) was handed out
  // Chat: where marker tokens lie in `decoded` (start, marker index); the parser gets them as
  // markers, never as text, and a marker is handed on only whole.
  std::vector<std::pair<size_t, size_t>> markers;
  size_t next_marker = 0;
  std::vector<TokenEntry> pending, done;  // logprob entries not yet / already released
  int64_t tokens = 0;
  int64_t reasoning_tokens = 0;  // tokens when reasoning text was last released
  std::string finish_reason;
  chat::ParsedMessage message;

  bool is_chat() const { return config.kind != OutputKind::kCompletion; }

  // Earliest stop string match at or after the released text.
  std::optional<size_t> find_stop() const {
    std::optional<size_t> best;
    for (const auto& s : config.stop) {
      const size_t p = decoded.find(s, released);
      if (p != std::string::npos && (!best || p < *best)) best = p;
    }
    return best;
  }

  // Length of the longest tail of `decoded` (after `released`) that is a proper prefix of a stop.
  size_t stop_prefix_tail() const {
    const size_t avail = decoded.size() - released;
    for (size_t k = std::min(avail, longest_stop > 0 ? longest_stop - 1 : 0); k > 0; --k) {
      const std::string_view tail = std::string_view(decoded).substr(decoded.size() - k);
      for (const auto& s : config.stop)
        if (s.size() > k && s.compare(0, k, tail) == 0) return k;
    }
    return 0;
  }

  Json entry_json_chat(const TokenEntry& e) const {
    auto token = [&](int64_t id, float lp) {
      const std::string_view bytes = tokenizer.token_bytes(static_cast<uint32_t>(id));
      Json b = Json::array();
      for (unsigned char c : bytes) b.push_back(c);
      Json t = Json::object();
      t["token"] = utf8::replace_invalid(bytes);
      t["logprob"] = logprob_json(lp);
      t["bytes"] = std::move(b);
      return t;
    };
    Json j = token(e.lp.id, e.lp.logprob);
    Json top = Json::array();
    for (const auto& [id, lp] : e.lp.top) top.push_back(token(id, lp));
    j["top_logprobs"] = std::move(top);
    return j;
  }

  Json logprobs_json(const std::vector<TokenEntry>& entries) const {
    if (is_chat()) {
      Json content = Json::array();
      for (const auto& e : entries) content.push_back(entry_json_chat(e));
      return Json{{"content", std::move(content)}};
    }
    Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
    for (const auto& e : entries) {
      tokens.push_back(utf8::replace_invalid(tokenizer.token_bytes(static_cast<uint32_t>(e.lp.id))));
      token_logprobs.push_back(logprob_json(e.lp.logprob));
      Json top = Json::object();
      for (const auto& [id, lp] : e.lp.top) {
        const std::string name = utf8::replace_invalid(tokenizer.token_bytes(static_cast<uint32_t>(id)));
        if (!top.contains(name)) top[name] = logprob_json(lp);
      }
      top_logprobs.push_back(std::move(top));
      offsets.push_back(e.start);
    }
    Json j = Json::object();
    j["tokens"] = std::move(tokens);
    j["token_logprobs"] = std::move(token_logprobs);
    j["top_logprobs"] = std::move(top_logprobs);
    j["text_offset"] = std::move(offsets);
    return j;
  }

  // Chat: a parser's delta into the update; reasoning_tokens follows the reasoning text.
  void add_delta(chat::ChatDelta& into, const chat::ChatDelta& d) {
    if (!d.reasoning_content.empty()) reasoning_tokens = tokens;
    into.append(d);
  }

  // Chat: hands decoded[released, upto) to the parser as text and whole markers; returns where
  // it stopped (before a marker that upto cuts).
  size_t parse_upto(size_t upto, chat::ChatDelta& delta) {
    size_t from = released;
    for (; next_marker < markers.size() && markers[next_marker].first < upto; ++next_marker) {
      const auto [start, index] = markers[next_marker];
      add_delta(delta, parser->text(std::string_view(decoded).substr(from, start - from)));
      from = start;
      const size_t end = start + parser->marker_names()[index].size();
      if (end > upto) return start;
      add_delta(delta, parser->marker(index));
      from = end;
    }
    add_delta(delta, parser->text(std::string_view(decoded).substr(from, upto - from)));
    return upto;
  }

  // Hands out decoded[released, upto) and the logprob entries `keep` selects.
  template <class Keep>
  void release(size_t upto, ChoiceUpdate& u, Keep keep) {
    if (parser) {
      released = parse_upto(upto, u.delta);
    } else {
      u.text += std::string_view(decoded).substr(released, upto - released);
      released = upto;
    }
    std::vector<TokenEntry> out;
    auto split = std::stable_partition(pending.begin(), pending.end(), [&](const TokenEntry& e) { return !keep(e); });
    out.assign(std::make_move_iterator(split), std::make_move_iterator(pending.end()));
    pending.erase(split, pending.end());
    if (!out.empty()) {
      u.logprobs = logprobs_json(out);
      done.insert(done.end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
    }
  }

  // The choice ends: cut at a stop string when one matched (else everything held is released).
  // `stop_token`: a stop token id ended it.
  void end(std::string reason, std::optional<size_t> cut, ChoiceUpdate& u, bool stop_token = false) {
    if (!cut) {
      decoded += decoder.finish();
      cut = find_stop();
      if (cut) reason = "stop";
    }
    if (cut) {
      decoded.resize(*cut);
      release(*cut, u, [&](const TokenEntry& e) { return e.start < *cut; });
      pending.clear();
    } else {
      release(decoded.size(), u, [](const TokenEntry&) { return true; });
    }
    if (is_chat()) finish_chat(reason, stop_token && !cut, u);
    finish_reason = reason;
    u.finish_reason = reason;
  }

  // `ended`: a stop token ended the reply (not a stop string, nor a limit).
  void finish_chat(std::string& reason, bool ended, ChoiceUpdate& u) {
    add_delta(u.delta, parser->finish(ended));
    message = parser->message();
    if (reason == "stop" && message.finish_reason == "tool_calls") reason = "tool_calls";
    message.finish_reason = reason;
  }
};

ChoiceOutput::ChoiceOutput(const Tokenizer& tokenizer, ChoiceConfig config)
    : s_(std::make_unique<State>(tokenizer, std::move(config))) {}
ChoiceOutput::~ChoiceOutput() = default;
ChoiceOutput::ChoiceOutput(ChoiceOutput&&) noexcept = default;
ChoiceOutput& ChoiceOutput::operator=(ChoiceOutput&&) noexcept = default;

ChoiceUpdate ChoiceOutput::feed(int64_t id, const TokenLogprobs* logprobs, bool closed_to_fit) {
  State& s = *s_;
  if (finished()) throw std::logic_error("ChoiceOutput::feed after the choice finished");
  ++s.tokens;
  ChoiceUpdate u;
  const auto& stops = s.config.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
    s.end(closed_to_fit ? "length" : "stop", std::nullopt, u, /*stop_token=*/true);
    return u;
  }
  const size_t start = s.decoded.size();
  s.decoded += s.decoder.push(static_cast<uint32_t>(id));
  if (const std::optional<size_t> marker = s.pieces ? s.pieces->marker(static_cast<uint32_t>(id)) : std::nullopt)
    s.markers.push_back({s.decoded.size() - s.parser->marker_names()[*marker].size(), *marker});
  if (s.config.top_logprobs >= 0) {
    if (!logprobs) throw std::logic_error("ChoiceOutput::feed: logprobs requested but not given");
    s.pending.push_back({start, s.decoded.size(), *logprobs});
  }
  if (const std::optional<size_t> cut = s.find_stop()) {
    s.end("stop", cut, u);
    return u;
  }
  if (s.config.max_tokens > 0 && s.tokens >= s.config.max_tokens) {
    s.end("length", std::nullopt, u);
    return u;
  }
  const size_t upto = s.decoded.size() - s.stop_prefix_tail();
  s.release(upto, u, [&](const TokenEntry& e) { return e.end <= upto; });
  return u;
}

ChoiceUpdate ChoiceOutput::finish(const std::string& reason) {
  ChoiceUpdate u;
  if (finished()) return u;
  s_->end(reason, std::nullopt, u);
  return u;
}

bool ChoiceOutput::finished() const { return !s_->finish_reason.empty(); }
const std::string& ChoiceOutput::finish_reason() const { return s_->finish_reason; }
int64_t ChoiceOutput::completion_tokens() const { return s_->tokens; }
int64_t ChoiceOutput::reasoning_tokens() const { return s_->reasoning_tokens; }
std::string ChoiceOutput::text() const { return s_->decoded.substr(0, s_->released); }
const chat::ParsedMessage& ChoiceOutput::message() const { return s_->message; }
bool ChoiceOutput::chat() const { return s_->is_chat(); }

chat::Json ChoiceOutput::logprobs() const {
  if (s_->config.top_logprobs < 0) return nullptr;
  return s_->logprobs_json(s_->done);
}

}  // namespace k3::server
