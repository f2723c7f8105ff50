#include "server/api/choice_output.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
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

// The specials a choice's parser consumes: decoded even when the others are skipped.
std::vector<std::string> parser_markers(OutputKind kind) {
  switch (kind) {
    case OutputKind::kChatK3: return chat::K3OutputParser::markers();
    case OutputKind::kChatKimiLinear: return chat::KimiLinearOutputParser::markers();
    case OutputKind::kCompletion: break;
  }
  return {};
}

}  // namespace

struct ChoiceOutput::State {
  State(const Tokenizer& t, ChoiceConfig c)
      : tokenizer(t),
        config(std::move(c)),
        decoder(t, config.skip_special ? SkipSpecial::kAll : SkipSpecial::kNone, parser_markers(config.kind)) {
    if (config.kind == OutputKind::kChatK3) k3.emplace(config.thinking, config.call_id_prefix);
    if (config.kind == OutputKind::kChatKimiLinear) kimi_linear.emplace();
    for (const auto& s : config.stop) longest_stop = std::max(longest_stop, s.size());
  }

  const Tokenizer& tokenizer;
  ChoiceConfig config;
  StreamDecoder decoder;
  std::optional<chat::K3OutputParser> k3;
  std::optional<chat::KimiLinearOutputParser> kimi_linear;
  size_t longest_stop = 0;

  std::string decoded;   // all decoded text (cut at a stop string)
  size_t released = 0;   // decoded[0, released) was handed out
  std::vector<TokenEntry> pending, done;  // logprob entries not yet / already released
  int64_t tokens = 0;
  int64_t reasoning_tokens = 0;  // tokens when reasoning text was last released
  std::string finish_reason;
  std::string streamed_reasoning, streamed_content;  // chat: what the deltas carried
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

  void add_delta(ChoiceUpdate& u, const chat::ChatDelta& d) {
    if (!d.reasoning_content.empty()) reasoning_tokens = tokens;
    streamed_reasoning += d.reasoning_content;
    streamed_content += d.content;
    u.delta.reasoning_content += d.reasoning_content;
    u.delta.content += d.content;
    u.delta.tool_calls.insert(u.delta.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  }

  // Hands out decoded[released, upto) and the logprob entries `keep` selects.
  template <class Keep>
  void release(size_t upto, ChoiceUpdate& u, Keep keep) {
    const std::string_view text = std::string_view(decoded).substr(released, upto - released);
    released = upto;
    if (!text.empty()) {
      if (k3) add_delta(u, k3->feed(text));
      else if (kimi_linear) add_delta(u, kimi_linear->feed(text));
      else u.text += text;
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
  void end(std::string reason, std::optional<size_t> cut, ChoiceUpdate& u) {
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
    if (is_chat()) finish_chat(reason, u);
    finish_reason = reason;
    u.finish_reason = reason;
  }

  void finish_chat(std::string& reason, ChoiceUpdate& u) {
    message = k3 ? k3->finish() : kimi_linear->finish();
    // What the parser still held (a U+FFFD tail) reaches the client as a last delta.
    auto tail = [](const std::optional<std::string>& all, const std::string& streamed) {
      const std::string& s = all ? *all : std::string();
      return s.size() > streamed.size() && s.compare(0, streamed.size(), streamed) == 0 ? s.substr(streamed.size()) : "";
    };
    chat::ChatDelta last;
    last.reasoning_content = tail(message.reasoning_content, streamed_reasoning);
    last.content = tail(message.content, streamed_content);
    add_delta(u, last);
    if (reason == "stop" && message.finish_reason == "tool_calls") reason = "tool_calls";
    message.finish_reason = reason;
  }
};

ChoiceOutput::ChoiceOutput(const Tokenizer& tokenizer, ChoiceConfig config)
    : s_(std::make_unique<State>(tokenizer, std::move(config))) {}
ChoiceOutput::~ChoiceOutput() = default;
ChoiceOutput::ChoiceOutput(ChoiceOutput&&) noexcept = default;
ChoiceOutput& ChoiceOutput::operator=(ChoiceOutput&&) noexcept = default;

ChoiceUpdate ChoiceOutput::feed(int64_t id, const TokenLogprobs* logprobs) {
  State& s = *s_;
  if (finished()) throw std::logic_error("ChoiceOutput::feed after the choice finished");
  ++s.tokens;
  ChoiceUpdate u;
  const auto& stops = s.config.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
    s.end("stop", std::nullopt, u);
    return u;
  }
  const size_t start = s.decoded.size();
  s.decoded += s.decoder.push(static_cast<uint32_t>(id));
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
