#include "eval/greedy.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "runtime/scheduler.h"

namespace k3::eval {
namespace {

struct Outcome {
  std::vector<int64_t> ids;
  std::optional<FinishReason> finish;
  std::string error;
};

// Records one request's tokens and counts it in `finished` when it ends.
class Collect final : public RequestSink {
 public:
  Collect(Outcome& out, size_t& finished) : out_(out), finished_(finished) {}
  bool on_token(const GeneratedToken& t) override {
    out_.ids.push_back(t.id);
    return true;
  }
  void on_finish(FinishReason reason, const std::string& error) override {
    out_.finish = reason;
    out_.error = error;
    ++finished_;
  }

 private:
  Outcome& out_;
  size_t& finished_;
};

}  // namespace

DecodeRun greedy_decode(Engine& engine, std::span<const DecodeJob> jobs, const std::vector<int64_t>& stop_ids,
                        int64_t max_batch_tokens) {
  SchedulerOptions options;
  options.max_batch_tokens = max_batch_tokens;
  options.prefix_cache = false;
  Scheduler scheduler(engine, options);
  // Requests are submitted as earlier ones finish, a window of twice the state slots ahead, so the
  // queue stays bounded however many jobs there are.
  const size_t window = static_cast<size_t>(std::clamp<int64_t>(2 * engine.caches().state_slots, 1, options.max_queue));
  std::vector<Outcome> outcomes(jobs.size());
  size_t submitted = 0, finished = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (finished < jobs.size()) {
    while (submitted < jobs.size() && submitted - finished < window) {
      RequestSpec spec;
      spec.prompt = jobs[submitted].prompt;
      spec.max_tokens = jobs[submitted].max_tokens;
      spec.stop_token_ids = stop_ids;
      scheduler.submit(std::move(spec), std::make_shared<Collect>(outcomes[submitted], finished));
      ++submitted;
    }
    if (!scheduler.step_once()) throw Error(Where{"", "", "eval"}, "the scheduler stopped with requests left");
  }
  DecodeRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (Outcome& o : outcomes) {
    if (*o.finish != FinishReason::kStop && *o.finish != FinishReason::kLength) {
      throw Error(o.error.empty() ? std::string("a request ended: ") + finish_reason_name(*o.finish) : o.error);
    }
    run.generated_tokens += static_cast<int64_t>(o.ids.size());
    run.replies.push_back(std::move(o.ids));
  }
  return run;
}

}  // namespace k3::eval
