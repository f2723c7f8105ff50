// /v1/responses output: the Response object, and its server-sent events when streamed, built from
// the choice's updates (server/api/choice_output.h) the same way whether streamed or not, so a
// stream's deltas add up to the final output exactly.
//
// Output items, in the order the model produced them (a new item starts when the kind changes):
//   reasoning {id "rs_…", summary [], content [{type reasoning_text, text}], status}
//   message {id "msg_…", status, role assistant, content [{type output_text, annotations [], logprobs [], text}]}
//   function_call {id "fc_…", status, arguments, call_id, name}
// A reply with neither a message nor a function call gets an empty message. Status completed;
// incomplete (incomplete_details {reason max_output_tokens}) when the token limit cut it; a
// streamed request that fails (timeout, engine error) ends with response.failed. A function call
// the limit cut is "incomplete".
//
// Events ("event: TYPE\ndata: JSON\n\n", no [DONE]; sequence_number counts from 0):
// response.created, response.in_progress; per item output_item.added, then for reasoning
// content_part.added, reasoning_text.delta..., reasoning_text.done, content_part.done; for a message
// content_part.added, output_text.delta..., output_text.done, content_part.done; for a call
// function_call_arguments.delta..., function_call_arguments.done; then output_item.done; finally
// response.completed, response.incomplete or response.failed with the whole Response.
//
// A completed or incomplete response with store true is kept in the ResponseStore (its
// conversation, then its output items) before the last event or the body is handed out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/json_text.h"
#include "server/api/openai_response.h"
#include "server/api/response_store.h"
#include "server/api/responses_request.h"

namespace k3::server {

class ResponsesOutput final : public OutputFormat {
 public:
  // `store` may be null (nothing kept).
  ResponsesOutput(ResponsesRequest request, ResponseHead head, ResponseStore* store);

  std::string begin(size_t choices) override;
  std::string update(size_t index, const ChoiceUpdate& update) override;
  std::string end(const std::vector<const ChoiceOutput*>& choices, const Usage& usage, const ApiError* failure) override;

 private:
  enum class Kind { kReasoning, kMessage, kCall };
  struct Item {
    Kind kind;
    std::string id, text;  // text: reasoning, message text or call arguments
    std::string call_id, name;
    std::string status = "in_progress";
  };

  chat::Json response(const std::string& status, const chat::Json& usage, const chat::Json& error) const;
  chat::Json item_json(const Item& item) const;
  void event(std::string& out, const char* type, chat::Json fields);
  Item& open(Kind kind, std::string& out, std::string call_id = "", std::string name = "");
  void close(std::string& out, const std::string& status);

  ResponsesRequest request_;
  ResponseHead head_;
  ResponseStore* store_;
  std::vector<Item> items_;
  bool item_open_ = false;              // items_.back() is still being written
  std::vector<size_t> call_items_;      // tool call index → item index
  int64_t sequence_ = 0;
};

std::unique_ptr<OutputFormat> responses_output(ResponsesRequest request, ResponseHead head, ResponseStore* store);

}  // namespace k3::server
