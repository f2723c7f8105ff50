// One generation request in flight (/v1/completions, /v1/chat/completions, /v1/responses): its n
// choices in the scheduler, their outputs (server/api/choice_output.h), the endpoint's OutputFormat
// and the HTTP exchange they answer. The scheduler's thread feeds the choices (RequestSink); the
// exchange's io thread reports a disconnect, which cancels every choice. A streamed request sends
// what the format makes of each update as it comes; a whole one answers when the last choice ends.
// Either way the request is counted in the metrics once.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "server/api/choice_output.h"
#include "server/api/openai_response.h"
#include "server/http/http_server.h"
#include "server/metrics.h"

namespace k3::server {

// What a finished request reports (the access log line).
struct JobSummary {
  std::string endpoint;
  int status = 200;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double seconds = 0;
  std::string error;
};
using JobLog = std::function<void(const JobSummary&)>;

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  struct Setup {
    std::string endpoint;           // the route, for the log
    std::unique_ptr<OutputFormat> output;
    bool stream = false;
    int64_t prompt_tokens = 0;
    std::vector<ChoiceConfig> choices;
    double timeout_s = 0;           // 0: none
  };
  CompletionJob(Setup setup, const Tokenizer& tokenizer, std::shared_ptr<HttpExchange> exchange, ServerMetrics& metrics,
                JobLog log);

  // Submits every choice (spec i for choice i); on a refusal cancels those already queued and
  // rethrows. Registers the exchange's disconnect callback.
  void start(Scheduler& scheduler, std::vector<RequestSpec> specs);

 private:
  class ChoiceSink;
  void on_admitted(size_t index, int64_t cached_prompt_tokens);
  void on_token(size_t index, const GeneratedToken& token, bool& more);
  void on_finish(size_t index, FinishReason reason, const std::string& error);
  void send_update(size_t index, const ChoiceUpdate& update);
  void complete();  // every choice ended: the last chunks or the whole response
  void count(int status, const std::string& error);

  Setup setup_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<HttpExchange> exchange_;
  ServerMetrics& metrics_;
  JobLog log_;
  Scheduler* scheduler_ = nullptr;

  std::mutex mutex_;  // the scheduler thread and the io thread's disconnect both reach the state
  std::vector<ChoiceOutput> outputs_;
  std::vector<int64_t> ids_;       // scheduler request ids
  std::vector<bool> ended_;
  int64_t cached_tokens_ = -1;     // the first choice's first admission (-1: not yet admitted)
  size_t open_ = 0;
  bool failed_ = false;            // an error or timeout: answered with an error object
  int error_status_ = 0;
  std::string error_;
  const std::chrono::steady_clock::time_point arrived_ = std::chrono::steady_clock::now();
  std::vector<std::chrono::steady_clock::time_point> last_token_;
  bool first_token_seen_ = false;
};

}  // namespace k3::server
