// Continuous batching over an Engine: the serving loop. Requests join and leave at every step; each
// step runs one decode token of every running sequence plus pieces of waiting prompts (chunked
// prefill), under a per-step token budget. First come, first served:
//   - admission takes waiting requests in arrival order while a state slot, cache blocks for the
//     first prompt piece and budget are left; a request is never overtaken by a later one;
//   - prompts are cut with next_prefill_end (runtime/prefill_chunks.h), so a request's numerics do
//     not depend on the budget or on what else runs (backend/cpu/forward.h);
//   - when a running sequence needs a cache block and none is free, the prefix cache gives back its
//     least recently used blocks first; then the most recently admitted sequence is preempted by
//     recompute: its blocks and slot are freed and it goes back to the head of the queue, keeping
//     the tokens it generated. On readmission its prompt is prefilled again and the generated
//     tokens are replayed one per step in decode form without sampling, so it continues exactly
//     where it stopped (the same numerics as if it had never been preempted);
//   - a request whose prompt plus max_tokens cannot fit the context or the cache is refused at
//     submit (never admitted to wait forever).
// Prefix cache: prompt blocks are offered to the radix tree (runtime/prefix_cache.h) as prefill
// passes them, with KDA snapshots where a prefill piece ends on a block boundary (the prompt's last
// whole block always gets one); a new request resumes from its longest cached prefix that ends at a
// snapshot, leaving at least two prompt tokens to compute. Only prompt blocks are cached: their rows
// were computed in prefill form, so a hit gives the logits a miss gives, bit for bit on the CPU.
//
// Threads: submit() and cancel() may be called from any thread; the loop (run_until_stopped or
// step_once) runs on one thread, which also calls every RequestSink.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"

namespace k3 {

struct RequestSpec {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stop_token_ids;  // the generated stop token is reported, then the request ends
  int top_logprobs = -1;                // −1: no logprobs; else the chosen token's plus this many
  std::optional<std::chrono::steady_clock::time_point> deadline;  // cancelled (kTimeout) after it
  // Restricts every sampled token (runtime/token_constraint.h); its mask is computed while a
  // device runs the step's forward pass (before it on the CPU backend), and the rows it constrains
  // are sampled on the host.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class FinishReason { kStop, kLength, kCancelled, kTimeout, kError };
const char* finish_reason_name(FinishReason reason);

struct GeneratedToken {
  int64_t id = 0;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
  bool stop = false;                      // one of stop_token_ids (the request ends with it)
  // A stop that a constraint brought forward to fit max_tokens (TokenConstraint::budget_steered):
  // the reply is complete but was cut by the length limit.
  bool closed_to_fit = false;
};

// What the loop reports back for one request, on the loop's thread. Keep it short: it runs between steps.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void on_admitted(int64_t cached_prompt_tokens) {}
  // Returns false to end the request now (e.g. a stop string matched), reported as kStop.
  virtual bool on_token(const GeneratedToken& token) = 0;
  virtual void on_finish(FinishReason reason, const std::string& error) = 0;
};

struct SchedulerOptions {
  int64_t max_batch_tokens = 2048;  // tokens per step (decode tokens + prompt pieces)
  int64_t max_queue = 1024;         // waiting requests; submit refuses beyond
  bool prefix_cache = true;
  int64_t prefix_cache_blocks = 0;  // cache size limit in blocks; 0 = no limit beyond the pool
};

struct SchedulerStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_free = 0, state_slots_used = 0, cached_blocks = 0;
  int64_t prefix_hit_tokens = 0, prefix_query_tokens = 0;  // totals
  int64_t preemptions = 0, steps = 0;
};

// One step's shape, for the step-batch histograms.
struct StepReport {
  int64_t tokens = 0, sequences = 0, decode_tokens = 0, prefill_tokens = 0;
  double seconds = 0;
};

class Scheduler {
 public:
  using StepObserver = std::function<void(const StepReport&)>;
  Scheduler(Engine& engine, const SchedulerOptions& options, StepObserver observer = {});
  ~Scheduler();

  // Queues a request; throws k3::Error (field "max_queue") when the queue is full, or naming the
  // field when the request can never run (prompt plus max_tokens over the context or the cache).
  // Returns the request's id for cancel().
  int64_t submit(RequestSpec spec, std::shared_ptr<RequestSink> sink);
  // Ends a request by the next step (on_finish kCancelled), wherever it is; unknown ids are ignored.
  void cancel(int64_t request);
  // Cancels every request (on_finish with `reason`), e.g. at the end of a drain.
  void cancel_all(FinishReason reason);

  // Runs one step if there is work; false when there was none.
  bool step_once();
  // Steps until stop(); sleeps while idle.
  void run_until_stopped();
  void stop();

  bool idle() const;
  SchedulerStats stats() const;

 private:
  struct Request;
  void take_inbox();
  void finish(Request& r, FinishReason reason, const std::string& error = "");
  bool admit(Request& r, int64_t budget);
  bool make_room(int64_t blocks, const Request* keep);
  void preempt(Request& r);
  void offer_prompt_blocks(Request& r, int64_t end);
  void after_step(Request& r, const StepResult& result, int64_t ran);
  int64_t piece_end(int64_t prefilled, int64_t total, int64_t budget) const;
  void publish_stats(bool stepped);  // stats_ from the loop's state (steps counted when `stepped`)

  Engine& engine_;
  SchedulerOptions options_;
  StepObserver observer_;
  std::optional<PrefixCache> cache_;
  bool hybrid_ = false;  // the model has KDA layers: prefix hits need snapshots

  mutable std::mutex mutex_;  // guards inbox_, cancels_, stopping_, queued_ and stats_
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::vector<int64_t> cancels_;
  bool stopping_ = false;
  int64_t queued_ = 0;  // inbox + waiting, for max_queue
  SchedulerStats stats_;
  int64_t next_id_ = 0;

  // Loop thread only.
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  std::map<int64_t, std::unique_ptr<Request>> requests_;
  int64_t reserved_ = 0;  // blocks this step's members will take when it runs
};

}  // namespace k3
