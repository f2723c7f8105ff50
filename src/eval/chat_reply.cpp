#include "eval/chat_reply.h"

#include <algorithm>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "chat/output_parsers.h"
#include "chat/request.h"
#include "chat/segments.h"
#include "chat/token_pieces.h"

namespace k3::eval {
namespace {

constexpr const char* kImEnd = "<|im_end|>";

}  // namespace

ChatFormat chat_format_of(const K3Config& config) {
  return config.model_type == ModelType::kKimiK3 ? ChatFormat::kKimiK3 : ChatFormat::kKimiLinear;
}

std::vector<int64_t> prompt_ids(const Tokenizer& tokenizer, ChatFormat format, const std::string& user) {
  chat::Request request;  // the defaults: thinking on, effort max, the generation prompt
  chat::Message m;
  m.role = "user";
  m.content.push_back(user);
  request.messages.push_back(std::move(m));
  const auto segments = format == ChatFormat::kKimiK3 ? chat::render_k3(request) : chat::render_kimi_linear(request);
  const std::vector<uint32_t> ids = chat::encode(tokenizer, segments);
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> stop_ids(const Tokenizer& tokenizer, ChatFormat format, const K3Config& config) {
  std::vector<int64_t> ids = config.tokens.eos;
  const std::string_view marker = format == ChatFormat::kKimiK3 ? chat::kEndOfMsg : std::string_view(kImEnd);
  if (const std::optional<uint32_t> id = tokenizer.find_special(marker)) {
    if (std::find(ids.begin(), ids.end(), int64_t{*id}) == ids.end()) ids.push_back(*id);
  }
  return ids;
}

std::string reply_text(const Tokenizer& tokenizer, std::span<const int64_t> reply) {
  const std::vector<uint32_t> ids(reply.begin(), reply.end());
  return tokenizer.decode(ids, /*skip_special=*/false);
}

std::string parsed_content(const Tokenizer& tokenizer, ChatFormat format, std::span<const int64_t> reply) {
  const auto parser = chat::make_output_parser(format == ChatFormat::kKimiK3, /*thinking=*/true);
  const chat::TokenPieces pieces(tokenizer, parser->marker_names(), SkipSpecial::kAll);
  for (int64_t id : reply) pieces.feed(*parser, static_cast<uint32_t>(id));
  parser->finish();
  return parser->message().content.value_or("");
}

std::string trained_reply(ChatFormat format, const std::string& answer) {
  if (format == ChatFormat::kKimiLinear) return answer + kImEnd;
  return "<|close|>think<|sep|><|open|>response<|sep|>" + answer +
         "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
}

int64_t reply_token_cap(const Tokenizer& tokenizer, const std::string& answer) {
  return 32 + 2 * static_cast<int64_t>(tokenizer.encode(answer, Specials::kNone).size());
}

}  // namespace k3::eval
