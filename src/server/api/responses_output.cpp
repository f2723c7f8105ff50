#include "server/api/responses_output.h"

#include <algorithm>

namespace k3::server {
namespace {

using chat::Json;

Json output_text_part(const std::string& text) {
  return Json{{"type", "output_text"}, {"annotations", Json::array()}, {"logprobs", Json::array()}, {"text", text}};
}

Json reasoning_part(const std::string& text) { return Json{{"type", "reasoning_text"}, {"text", text}}; }

}  // namespace

ResponsesOutput::ResponsesOutput(ResponsesRequest request, ResponseHead head, ResponseStore* store)
    : request_(std::move(request)), head_(std::move(head)), store_(store) {}

Json ResponsesOutput::item_json(const Item& item) const {
  const bool started = item.status == "in_progress";  // as announced: no content yet
  Json j = Json::object();
  j["id"] = item.id;
  switch (item.kind) {
    case Kind::kReasoning:
      j["type"] = "reasoning";
      j["summary"] = Json::array();
      j["content"] = started ? Json::array() : Json::array({reasoning_part(item.text)});
      break;
    case Kind::kMessage:
      j["type"] = "message";
      j["status"] = item.status;
      j["role"] = "assistant";
      j["content"] = started ? Json::array() : Json::array({output_text_part(item.text)});
      return j;
    case Kind::kCall:
      j["type"] = "function_call";
      j["status"] = item.status;
      j["arguments"] = started ? std::string() : item.text;
      j["call_id"] = item.call_id;
      j["name"] = item.name;
      return j;
  }
  j["status"] = item.status;
  return j;
}

Json ResponsesOutput::response(const std::string& status, const Json& usage, const Json& error) const {
  Json r = Json::object();
  r["id"] = head_.id;
  r["object"] = "response";
  r["created_at"] = head_.created;
  r["status"] = status;
  r["error"] = error;
  r["incomplete_details"] = status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  r["model"] = head_.model;
  Json output = Json::array();
  if (status != "in_progress")
    for (const Item& item : items_) output.push_back(item_json(item));
  r["output"] = std::move(output);
  r["usage"] = usage;
  for (const auto& [key, value] : request_.echo.items()) r[key] = value;
  return r;
}

void ResponsesOutput::event(std::string& out, const char* type, Json fields) {
  const int64_t sequence = sequence_++;
  if (!request_.chat.stream) return;
  Json e = Json::object();
  e["type"] = type;
  for (auto& [key, value] : fields.items()) e[key] = std::move(value);
  e["sequence_number"] = sequence;
  out += "event: ";
  out += type;
  out += "\ndata: " + chat::dump_output(e) + "\n\n";
}

ResponsesOutput::Item& ResponsesOutput::open(Kind kind, std::string& out, std::string call_id, std::string name) {
  if (item_open_ && items_.back().kind == kind && kind != Kind::kCall) return items_.back();
  if (item_open_) close(out, "completed");
  const char* prefix = kind == Kind::kReasoning ? "rs_" : kind == Kind::kMessage ? "msg_" : "fc_";
  items_.push_back(Item{kind, new_response_id(prefix), "", std::move(call_id), std::move(name)});
  item_open_ = true;
  const Item& item = items_.back();
  const size_t index = items_.size() - 1;
  event(out, "response.output_item.added", Json{{"output_index", index}, {"item", item_json(item)}});
  if (kind == Kind::kReasoning || kind == Kind::kMessage) {
    event(out, "response.content_part.added",
          Json{{"item_id", item.id}, {"output_index", index}, {"content_index", 0},
               {"part", kind == Kind::kReasoning ? reasoning_part("") : output_text_part("")}});
  }
  return items_.back();
}

void ResponsesOutput::close(std::string& out, const std::string& status) {
  if (!item_open_) return;
  item_open_ = false;
  Item& item = items_.back();
  item.status = status;
  const size_t index = items_.size() - 1;
  const Json where = Json{{"item_id", item.id}, {"output_index", index}};
  if (item.kind == Kind::kCall) {
    Json done = where;
    done["name"] = item.name;
    done["arguments"] = item.text;
    event(out, "response.function_call_arguments.done", std::move(done));
  } else {
    const bool reasoning = item.kind == Kind::kReasoning;
    Json done = where;
    done["content_index"] = 0;
    if (!reasoning) done["logprobs"] = Json::array();
    done["text"] = item.text;
    event(out, reasoning ? "response.reasoning_text.done" : "response.output_text.done", std::move(done));
    Json part = where;
    part["content_index"] = 0;
    part["part"] = reasoning ? reasoning_part(item.text) : output_text_part(item.text);
    event(out, "response.content_part.done", std::move(part));
  }
  event(out, "response.output_item.done", Json{{"output_index", index}, {"item", item_json(item)}});
}

std::string ResponsesOutput::begin(size_t) {
  std::string out;
  const Json r = response("in_progress", nullptr, nullptr);
  event(out, "response.created", Json{{"response", r}});
  event(out, "response.in_progress", Json{{"response", r}});
  return out;
}

std::string ResponsesOutput::update(size_t, const ChoiceUpdate& update) {
  std::string out;
  const chat::ChatDelta& d = update.delta;
  auto text_delta = [&](Kind kind, const std::string& text, const char* type) {
    if (text.empty()) return;
    Item& item = open(kind, out);
    item.text += text;
    Json e = Json{{"item_id", item.id}, {"output_index", items_.size() - 1}, {"content_index", 0}, {"delta", text}};
    if (kind == Kind::kMessage) e["logprobs"] = Json::array();
    event(out, type, std::move(e));
  };
  text_delta(Kind::kReasoning, d.reasoning_content, "response.reasoning_text.delta");
  text_delta(Kind::kMessage, d.content, "response.output_text.delta");
  for (const chat::ToolCallDelta& c : d.tool_calls) {
    if (!c.id.empty()) {
      open(Kind::kCall, out, c.id, c.name);
      call_items_.resize(std::max(call_items_.size(), c.index + 1), items_.size() - 1);
      call_items_[c.index] = items_.size() - 1;
    }
    if (c.arguments.empty() || c.index >= call_items_.size()) continue;
    Item& item = items_[call_items_[c.index]];
    item.text += c.arguments;
    event(out, "response.function_call_arguments.delta",
          Json{{"item_id", item.id}, {"output_index", call_items_[c.index]}, {"delta", c.arguments}});
  }
  return out;
}

std::string ResponsesOutput::end(const std::vector<const ChoiceOutput*>& choices, const Usage& usage, const ApiError* failure) {
  std::string out;
  const ChoiceOutput& choice = *choices.at(0);
  const chat::ParsedMessage& message = choice.message();
  const std::string status = failure ? "failed" : choice.finish_reason() == "length" ? "incomplete" : "completed";
  if (item_open_ && items_.back().kind == Kind::kCall) {
    // The open call is the message's call at the same position: by position, not by id, since the
    // model writes the ids and may repeat one.
    Item& call = items_.back();
    const size_t position = static_cast<size_t>(std::find(call_items_.begin(), call_items_.end(), items_.size() - 1) -
                                                call_items_.begin());
    const chat::ParsedToolCall* parsed = position < message.tool_calls.size() ? &message.tool_calls[position] : nullptr;
    if (parsed != nullptr) call.text = parsed->arguments;
    close(out, parsed != nullptr && parsed->complete ? "completed" : "incomplete");
  }
  close(out, status == "completed" ? "completed" : "incomplete");
  const bool replied = std::any_of(items_.begin(), items_.end(), [](const Item& i) { return i.kind != Kind::kReasoning; });
  if (!failure && !replied) {
    open(Kind::kMessage, out);
    close(out, status);
  }

  Json u = Json::object();
  u["input_tokens"] = usage.prompt_tokens;
  u["input_tokens_details"] = Json{{"cached_tokens", usage.cached_tokens}};
  u["output_tokens"] = usage.completion_tokens;
  u["output_tokens_details"] = Json{{"reasoning_tokens", choice.reasoning_tokens()}};
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  Json error = nullptr;
  if (failure) error = Json{{"code", failure->code().empty() ? "server_error" : failure->code()}, {"message", failure->what()}};
  Json r = response(status, u, error);

  if (!failure && request_.store && store_) {
    Json conversation = std::move(request_.conversation);
    for (const Json& item : r["output"]) conversation.push_back(item);
    store_->put(head_.id, conversation);
  }
  if (!request_.chat.stream) return chat::dump_output(r);
  event(out, failure ? "response.failed" : status == "incomplete" ? "response.incomplete" : "response.completed",
        Json{{"response", std::move(r)}});
  return out;
}

std::unique_ptr<OutputFormat> responses_output(ResponsesRequest request, ResponseHead head, ResponseStore* store) {
  return std::make_unique<ResponsesOutput>(std::move(request), std::move(head), store);
}

}  // namespace k3::server
