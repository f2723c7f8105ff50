#include "server/completion_job.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"

namespace k3::server {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

class CompletionJob::ChoiceSink final : public RequestSink {
 public:
  ChoiceSink(std::shared_ptr<CompletionJob> job, size_t index) : job_(std::move(job)), index_(index) {}
  void on_admitted(int64_t cached_prompt_tokens) override { job_->on_admitted(index_, cached_prompt_tokens); }
  bool on_token(const GeneratedToken& token) override {
    bool more = true;
    job_->on_token(index_, token, more);
    return more;
  }
  void on_finish(FinishReason reason, const std::string& error) override { job_->on_finish(index_, reason, error); }

 private:
  std::shared_ptr<CompletionJob> job_;  // the job lives until its last choice ends
  size_t index_;
};

CompletionJob::CompletionJob(Setup setup, const Tokenizer& tokenizer, std::shared_ptr<HttpExchange> exchange,
                             ServerMetrics& metrics, JobLog log)
    : setup_(std::move(setup)), tokenizer_(tokenizer), exchange_(std::move(exchange)), metrics_(metrics), log_(std::move(log)) {
  for (const ChoiceConfig& c : setup_.choices) outputs_.emplace_back(tokenizer_, c);
  ended_.assign(outputs_.size(), false);
  last_token_.assign(outputs_.size(), arrived_);
}

void CompletionJob::start(Scheduler& scheduler, std::vector<RequestSpec> specs) {
  {
    std::lock_guard lock(mutex_);  // callbacks wait until the stream has begun
    scheduler_ = &scheduler;
    try {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (setup_.timeout_s > 0) {
          specs[i].deadline = arrived_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(setup_.timeout_s));
        }
        ids_.push_back(scheduler.submit(std::move(specs[i]), std::make_shared<ChoiceSink>(shared_from_this(), i)));
        ++open_;
      }
    } catch (...) {
      for (int64_t id : ids_) scheduler.cancel(id);
      ended_.assign(outputs_.size(), true);  // the cancelled choices' reports find nothing to do
      throw;
    }
    if (setup_.stream) {
      exchange_->begin_stream();
      if (std::string events = setup_.output->begin(outputs_.size()); !events.empty()) exchange_->send(std::move(events));
    }
  }
  // Outside the lock: a client already gone runs the callback at once, here.
  std::weak_ptr<CompletionJob> weak = weak_from_this();
  exchange_->on_close([weak] {
    if (auto job = weak.lock()) {
      std::lock_guard lock(job->mutex_);
      for (size_t i = 0; i < job->ids_.size(); ++i) {
        if (!job->ended_[i]) job->scheduler_->cancel(job->ids_[i]);
      }
    }
  });
}

void CompletionJob::on_admitted(size_t index, int64_t cached_prompt_tokens) {
  std::lock_guard lock(mutex_);
  if (index == 0 && cached_tokens_ < 0) cached_tokens_ = cached_prompt_tokens;
}

void CompletionJob::on_token(size_t index, const GeneratedToken& token, bool& more) {
  std::lock_guard lock(mutex_);
  if (ended_[index] || outputs_[index].finished()) {
    more = false;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!first_token_seen_) {
    metrics_.time_to_first_token.observe(seconds_between(arrived_, now));
    first_token_seen_ = true;
  } else if (last_token_[index] != arrived_) {
    metrics_.inter_token_latency.observe(seconds_between(last_token_[index], now));
  }
  last_token_[index] = now;
  send_update(index, outputs_[index].feed(token.id, token.logprobs ? &*token.logprobs : nullptr, token.closed_to_fit));
  if (outputs_[index].finished()) more = false;
}

void CompletionJob::on_finish(size_t index, FinishReason reason, const std::string& error) {
  std::lock_guard lock(mutex_);
  if (ended_[index]) return;
  ended_[index] = true;
  --open_;
  ChoiceOutput& out = outputs_[index];
  if (!out.finished()) {
    switch (reason) {
      case FinishReason::kTimeout:
        failed_ = true;
        error_status_ = 408;
        error_ = "the request ran longer than the server's request timeout of " + short_number(setup_.timeout_s) + " s";
        break;
      case FinishReason::kError:
        failed_ = true;
        error_status_ = 500;
        error_ = error;
        break;
      default: break;
    }
    const ChoiceUpdate update = out.finish(reason == FinishReason::kLength ? "length" : "stop");
    if (!failed_) send_update(index, update);
  }
  if (open_ == 0) complete();
}

void CompletionJob::send_update(size_t index, const ChoiceUpdate& update) {
  if (update.empty()) return;
  std::string events = setup_.output->update(index, update);
  if (setup_.stream && !events.empty()) exchange_->send(std::move(events));
}

void CompletionJob::complete() {
  if (exchange_->closed()) {
    count(499, "the client closed the connection");
    return;
  }
  std::vector<const ChoiceOutput*> choices;
  for (const ChoiceOutput& o : outputs_) choices.push_back(&o);
  Usage usage = usage_of(setup_.prompt_tokens, choices);
  usage.cached_tokens = std::max<int64_t>(0, cached_tokens_);
  if (setup_.stream) {
    const ApiError failure(error_status_, error_);
    exchange_->send(setup_.output->end(choices, usage, failed_ ? &failure : nullptr));
    exchange_->end_stream();
    count(failed_ ? error_status_ : 200, error_);
    return;
  }
  if (failed_) {
    exchange_->respond_error(error_status_, error_);
    count(error_status_, error_);
    return;
  }
  exchange_->respond(200, "application/json", setup_.output->end(choices, usage, nullptr));
  count(200, "");
}

void CompletionJob::count(int status, const std::string& error) {
  int64_t completion = 0;
  for (const ChoiceOutput& o : outputs_) completion += o.completion_tokens();
  const double seconds = seconds_between(arrived_, std::chrono::steady_clock::now());
  metrics_.requests.inc(1, std::to_string(status));
  metrics_.prompt_tokens.inc(static_cast<double>(setup_.prompt_tokens));
  metrics_.generation_tokens.inc(static_cast<double>(completion));
  metrics_.e2e_request_latency.observe(seconds);
  if (log_) log_({setup_.endpoint, status, setup_.prompt_tokens, completion, seconds, error});
}

}  // namespace k3::server
