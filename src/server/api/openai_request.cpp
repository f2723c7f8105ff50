#include "server/api/openai_request.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <random>

#include "chat/k3_format.h"
#include "chat/reply_grammar.h"
#include "chat/kimi_linear_format.h"
#include "core/error.h"
#include "io/json.h"
#include "server/api/request_fields.h"
#include "server/api_error.h"

namespace k3::server {

using chat::Json;
using namespace request_fields;

chat::Json parse_request_body(std::string_view body) {
  Json j;
  try {
    j = parse_json_value<Json>(body, Where{"request body", "", ""});
  } catch (const Error& e) {
    throw ApiError(400, e.what(), e.where().field);
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

namespace {

// Known fields that would change the result, refused rather than ignored.
void refuse_unsupported(const Json& j, int n, bool chat) {
  if (const Json* v = field(j, "logit_bias"); v && !(v->is_object() && v->empty())) unsupported("logit_bias", "logit_bias");
  if (const Json* v = field(j, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == n))
    unsupported("best_of", "best_of other than n");
  if (const Json* v = field(j, "echo"); v && !(v->is_boolean() && !v->get<bool>())) unsupported("echo", "echo");
  if (const Json* v = field(j, "suffix"); v && !(v->is_string() && v->get_ref<const std::string&>().empty()))
    unsupported("suffix", "suffix");
  if (const Json* v = field(j, "response_format")) {
    const Json* type = v->is_object() ? field(*v, "type") : nullptr;
    if (!type || !type->is_string()) bad("response_format.type", "expected a string");
    const std::string& t = type->get_ref<const std::string&>();
    // The JSON modes are grammar-constrained chat replies (chat/reply_grammar.h).
    if (t != "text" && !(chat && (t == "json_object" || t == "json_schema")))
      unsupported("response_format", "response_format " + quote_bytes(type->get<std::string>()));
  }
  for (const char* key : {"functions", "function_call", "prediction", "audio", "web_search_options"})
    if (field(j, key)) unsupported(key, key);
  if (const Json* v = field(j, "modalities"); v && *v != Json::array({"text"})) unsupported("modalities", "output other than text");
  if (const Json* v = field(j, "use_beam_search"); v && *v != Json(false)) unsupported("use_beam_search", "beam search");
  if (const Json* v = field(j, "min_tokens"); v && *v != Json(0)) unsupported("min_tokens", "min_tokens");
  if (const Json* v = field(j, "repetition_penalty"); v && !(v->is_number() && v->get<double>() == 1.0))
    unsupported("repetition_penalty", "repetition_penalty");
  if (const Json* v = field(j, "include_stop_str_in_output"); v && *v != Json(false))
    unsupported("include_stop_str_in_output", "include_stop_str_in_output");
  for (const auto& [key, value] : j.items())
    if (key.rfind("guided_", 0) == 0 && !value.is_null()) unsupported(key, key);
}

std::vector<std::string> parse_stop(const Json& j) {
  const Json* v = field(j, "stop");
  if (!v) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 4) bad("stop", "at most 4 stop strings");
    for (const Json& s : *v) {
      if (!s.is_string()) bad("stop", "expected a string or an array of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "expected a string or an array of strings");
  }
  for (const auto& s : stop)
    if (s.empty()) bad("stop", "stop strings must not be empty");
  return stop;
}

std::vector<int64_t> token_ids(const Json& v, const std::string& name, int64_t vocab) {
  if (!v.is_array()) bad(name, "expected an array of token ids");
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) ids.push_back(as_integer(v[i], name + "[" + std::to_string(i) + "]", 0, vocab - 1));
  return ids;
}

uint64_t random_seed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// Everything but the prompt and max_tokens. `chat` selects the logprobs form.
void parse_common(const Json& j, const ApiContext& ctx, bool chat, RequestCommon& r) {
  if (const Json* m = field(j, "model")) {
    if (!m->is_string()) bad("model", "expected a string");
    if (m->get_ref<const std::string&>() != ctx.served_model_name)
      throw ApiError(404, "The model " + quote_bytes(m->get<std::string>()) + " does not exist", "model", "model_not_found");
  }
  r.model = ctx.served_model_name;
  r.n = static_cast<int>(integer_in(j, "n", 1, ctx.max_n).value_or(1));
  refuse_unsupported(j, r.n, chat);
  r.stop = parse_stop(j);
  r.stream = boolean(j, "stream").value_or(false);
  r.skip_special_tokens = boolean(j, "skip_special_tokens").value_or(true);
  if (const Json* so = field(j, "stream_options")) {
    if (!r.stream) bad("stream_options", "only allowed when stream is true");
    if (!so->is_object()) bad("stream_options", "expected an object");
    if (const Json* u = field(*so, "include_usage")) {
      if (!u->is_boolean()) bad("stream_options.include_usage", "expected a boolean");
      r.include_usage = u->get<bool>();
    }
  }
  if (const Json* v = field(j, "parallel_tool_calls"); v && !v->is_boolean()) bad("parallel_tool_calls", "expected a boolean");

  SamplingParams& s = r.gen.sampling;
  const double temperature = number_in(j, "temperature", 0, 2).value_or(1.0);
  s.greedy = temperature == 0;
  s.temperature = s.greedy ? 1.0 : temperature;
  s.top_p = number_in(j, "top_p", 0, 1, true).value_or(1.0);
  if (const Json* k = field(j, "top_k")) {
    const int64_t top_k = as_integer(*k, "top_k", -1, std::numeric_limits<int64_t>::max());
    s.top_k = top_k < 0 ? 0 : top_k;
  }
  s.min_p = number_in(j, "min_p", 0, 1).value_or(0.0);
  s.presence_penalty = number_in(j, "presence_penalty", -2, 2).value_or(0.0);
  s.frequency_penalty = number_in(j, "frequency_penalty", -2, 2).value_or(0.0);
  const std::optional<int64_t> seed =
      integer_in(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  s.seed = seed ? static_cast<uint64_t>(*seed) : random_seed();
  try {
    validate(s);
  } catch (const Error& e) {
    bad(e.where().field, e.detail());
  }

  if (const Json* ids = field(j, "stop_token_ids")) r.gen.stop_token_ids = token_ids(*ids, "stop_token_ids", ctx.config.vocab_size);
  if (!boolean(j, "ignore_eos").value_or(false))
    for (int64_t eos : ctx.config.tokens.eos)
      if (std::find(r.gen.stop_token_ids.begin(), r.gen.stop_token_ids.end(), eos) == r.gen.stop_token_ids.end())
        r.gen.stop_token_ids.push_back(eos);

  if (chat) {
    const bool logprobs = boolean(j, "logprobs").value_or(false);
    const std::optional<int64_t> top = integer_in(j, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !logprobs) bad("top_logprobs", "requires logprobs to be true");
    r.gen.top_logprobs = logprobs ? static_cast<int>(top.value_or(0)) : -1;
  } else {
    const Json* lp = field(j, "logprobs");
    if (lp && lp->is_boolean()) bad("logprobs", "expected an integer in [0, 5]");
    r.gen.top_logprobs = static_cast<int>(integer_in(j, "logprobs", 0, 5).value_or(-1));
  }
}

// The prompt length against the context, then max_tokens (`keys` in order of preference).
void set_max_tokens(const Json& j, const ApiContext& ctx, const char* prompt_field, std::initializer_list<const char*> keys,
                    GenerationParams& gen) {
  const int64_t prompt = static_cast<int64_t>(gen.prompt.size());
  if (prompt == 0) bad(prompt_field, "the prompt must not be empty");
  const std::string limit = "This model's maximum context length is " + std::to_string(ctx.max_context) + " tokens";
  if (prompt + 1 > ctx.max_context)
    throw ApiError(400, limit + "; the prompt has " + std::to_string(prompt) + " tokens, which leaves none to generate",
                   prompt_field, "context_length_exceeded");
  for (const char* key : keys) {
    const std::optional<int64_t> max = integer_in(j, key, 1, std::numeric_limits<int64_t>::max());
    if (!max) continue;
    if (*max > ctx.max_context - prompt)
      throw ApiError(400, limit + "; " + std::to_string(prompt) + " prompt tokens + " + key + " " + std::to_string(*max) +
                              " exceed it",
                     key, "context_length_exceeded");
    gen.max_tokens = *max;
    return;
  }
  gen.max_tokens = ctx.max_context - prompt;
}

std::vector<int64_t> encode_prompt(const std::string& text, const ApiContext& ctx, const char* name) {
  try {
    const std::vector<uint32_t> ids = ctx.tokenizer.encode(text, Specials::kAll);
    return {ids.begin(), ids.end()};
  } catch (const Error& e) {
    bad(name, e.detail());
  }
}

std::vector<int64_t> completion_prompt(const Json& j, const ApiContext& ctx) {
  const Json* p = field(j, "prompt");
  if (!p) bad("prompt", "missing");
  if (p->is_string()) return encode_prompt(p->get<std::string>(), ctx, "prompt");
  if (!p->is_array()) bad("prompt", "expected a string or an array of token ids");
  if (!p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) bad("prompt", "batched prompts are not supported (send one prompt per request)");
  return token_ids(*p, "prompt", ctx.config.vocab_size);
}

// A chat::Request from the body: roles and tool_choice forms mapped (see the header) first.
chat::Request chat_request(Json j) {
  if (Json* messages = j.contains("messages") ? &j["messages"] : nullptr; messages && messages->is_array()) {
    for (Json& m : *messages)
      if (m.is_object() && m.contains("role") && m["role"] == "developer") m["role"] = "system";
  }
  if (const Json* tc = field(j, "tool_choice"); tc && tc->is_object()) {
    const Json* fn = field(*tc, "function");
    const Json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!tc->contains("type") || (*tc)["type"] != "function" || !name || !name->is_string())
      bad("tool_choice", "expected auto, none, required or {\"type\":\"function\",\"function\":{\"name\":...}}");
    Json chosen = Json::array();
    if (const Json* tools = field(j, "tools"); tools && tools->is_array())
      for (const Json& t : *tools)
        if (t.is_object() && t.contains("function") && t["function"].is_object() && t["function"].value("name", Json()) == *name)
          chosen.push_back(t);
    if (chosen.empty()) bad("tool_choice", "names the tool " + quote_bytes(name->get<std::string>()) + ", which is not in tools");
    j["tools"] = std::move(chosen);
    j["tool_choice"] = "required";
  }
  try {
    return chat::request_from_json(j);
  } catch (const Error& e) {
    bad(e.where().field, e.detail());
  }
}

bool k3_format(const ApiContext& ctx) { return ctx.config.model_type == ModelType::kKimiK3; }

std::vector<int64_t> chat_prompt(const chat::Request& request, const ApiContext& ctx) {
  try {
    const auto segments = k3_format(ctx) ? chat::render_k3(request) : chat::render_kimi_linear(request);
    const std::vector<uint32_t> ids = chat::encode(ctx.tokenizer, segments);
    return {ids.begin(), ids.end()};
  } catch (const Error& e) {
    bad(e.where().field.empty() ? "messages" : e.where().field, e.detail());
  }
}

}  // namespace

GenerationParams choice_params(const GenerationParams& gen, int index) {
  GenerationParams g = gen;
  g.sampling.seed += static_cast<uint64_t>(index);
  return g;
}

CompletionRequest parse_completion_request(std::string_view body, const ApiContext& ctx) {
  const Json j = parse_request_body(body);
  CompletionRequest r;
  parse_common(j, ctx, false, r);
  r.gen.prompt = completion_prompt(j, ctx);
  set_max_tokens(j, ctx, "prompt", {"max_tokens"}, r.gen);
  return r;
}

ChatCompletionRequest parse_chat_request(std::string_view body, const ApiContext& ctx) {
  return chat_request_from_json(parse_request_body(body), ctx);
}

ChatCompletionRequest chat_request_from_json(const chat::Json& j, const ApiContext& ctx) {
  ChatCompletionRequest r;
  parse_common(j, ctx, true, r);
  r.logprobs = r.gen.top_logprobs >= 0;
  r.chat = chat_request(j);
  r.k3_format = k3_format(ctx);
  r.gen.prompt = chat_prompt(r.chat, ctx);
  r.chat.parallel_tool_calls = boolean(j, "parallel_tool_calls").value_or(true);
  try {
    r.reply_grammar = chat::reply_grammar(r.chat, r.k3_format ? chat::ReplyFormat::kKimiK3 : chat::ReplyFormat::kKimiLinear);
  } catch (const Error& e) {
    bad(e.where().field, e.detail());
  }
  set_max_tokens(j, ctx, "messages", {"max_completion_tokens", "max_tokens"}, r.gen);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random_seed()));
  r.call_id_prefix = "call_" + std::string(hex, 8) + "_";
  return r;
}

std::string tokenize_response(std::string_view body, const ApiContext& ctx) {
  Json j = parse_request_body(body);
  if (const Json* m = field(j, "model"); m && *m != Json(ctx.served_model_name))
    throw ApiError(404, "The model " + quote_bytes(m->is_string() ? m->get<std::string>() : m->dump()) + " does not exist",
                   "model", "model_not_found");
  boolean(j, "add_special_tokens");
  std::vector<int64_t> tokens;
  if (field(j, "messages")) {
    const std::optional<bool> generation_prompt = boolean(j, "add_generation_prompt");
    chat::Request request = chat_request(j);
    request.add_generation_prompt = generation_prompt.value_or(true);
    tokens = chat_prompt(request, ctx);
  } else {
    const Json* p = field(j, "prompt");
    if (!p || !p->is_string()) bad("prompt", "expected a string (or give messages)");
    tokens = encode_prompt(p->get<std::string>(), ctx, "prompt");
  }
  Json out = Json::object();
  out["tokens"] = tokens;
  out["count"] = tokens.size();
  out["max_model_len"] = ctx.max_context;
  return chat::dump_output(out);
}

std::string detokenize_response(std::string_view body, const ApiContext& ctx) {
  const Json j = parse_request_body(body);
  const Json* t = field(j, "tokens");
  if (!t) bad("tokens", "missing");
  const std::vector<int64_t> ids = token_ids(*t, "tokens", ctx.tokenizer.n_vocab());
  const std::vector<uint32_t> ids32(ids.begin(), ids.end());
  Json out = Json::object();
  out["prompt"] = ctx.tokenizer.decode(ids32);
  return chat::dump_output(out);
}

}  // namespace k3::server
