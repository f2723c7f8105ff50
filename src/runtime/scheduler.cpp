#include "runtime/scheduler.h"

#include <algorithm>
#include <future>

#include "core/error.h"
#include "runtime/prefill_chunks.h"

namespace k3 {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kTimeout: return "timeout";
    case FinishReason::kError: break;
  }
  return "error";
}

struct Scheduler::Request {
  int64_t id = 0;
  RequestSpec spec;
  std::shared_ptr<RequestSink> sink;
  Sampler sampler;
  int64_t sequence = -1;            // the engine's sequence while admitted
  int64_t prefilled = 0;            // prompt tokens run
  std::vector<int64_t> generated;   // sampled tokens, kept across a preemption
  int64_t fed = 0;                  // generated tokens run (the last one is fed by the next decode)
  bool in_step = false;
  std::vector<uint32_t> allowed;    // the constraint's mask for the token this step samples

  Request(int64_t id, RequestSpec s, std::shared_ptr<RequestSink> k)
      : id(id), spec(std::move(s)), sink(std::move(k)), sampler(spec.sampling) {}
  int64_t prompt_tokens() const { return static_cast<int64_t>(spec.prompt.size()); }
  bool prefilling() const { return prefilled < prompt_tokens(); }
  // Tokens the reply may still have, the one sampled next included.
  int64_t tokens_left() const { return spec.max_tokens - static_cast<int64_t>(generated.size()); }
  // Whether the step running `tokens` more tokens ends at the frontier, where a token is sampled.
  bool samples_after(int64_t tokens) const {
    if (prefilling()) return prefilled + tokens == prompt_tokens() && generated.empty();
    return fed + 1 == static_cast<int64_t>(generated.size());
  }
  // Sampling needs the logits (else the greedy pick is enough, made where the logits are).
  bool needs_logits() const {
    const SamplingParams& p = spec.sampling;
    return !p.greedy || p.presence_penalty != 0 || p.frequency_penalty != 0 || spec.top_logprobs >= 0 || spec.constraint;
  }
};

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options, StepObserver observer)
    : engine_(engine), options_(options), observer_(std::move(observer)) {
  if (options.max_batch_tokens < kPrefillAlign) {
    throw Error(Where{"", "", "max_batch_tokens"}, "must be at least " + std::to_string(kPrefillAlign));
  }
  if (options.max_queue < 0) throw Error(Where{"", "", "max_queue"}, "must be ≥ 0");
  if (options.prefix_cache_blocks < 0) throw Error(Where{"", "", "prefix_cache_size"}, "must be ≥ 0");
  const K3Config& c = engine.config();
  for (int64_t l = 0; l < c.num_layers; ++l) hybrid_ = hybrid_ || c.is_kda(l);
  const CacheGeometry& g = engine.caches();
  if (options.prefix_cache) {
    if (!g.paged) throw Error(Where{"", "", "prefix_cache"}, "this device's cache is not paged: run with the prefix cache off");
    if (hybrid_ && g.snapshot_slots == 0) throw Error(Where{"", "", "prefix_cache"}, "no KDA snapshot slots on this device");
    if (g.block_tokens != kPrefillAlign) {
      throw Error(Where{"", "", "prefix_cache"}, "needs cache blocks of " + std::to_string(kPrefillAlign) + " tokens");
    }
    cache_.emplace(g.block_tokens, &engine.kv_pool(), hybrid_ ? &engine.snapshot_pool() : nullptr);
  }
}

Scheduler::~Scheduler() {
  for (auto& [id, r] : requests_) {
    if (r->sequence >= 0) engine_.free_sequence(r->sequence);
  }
}

int64_t Scheduler::submit(RequestSpec spec, std::shared_ptr<RequestSink> sink) {
  const int64_t prompt = static_cast<int64_t>(spec.prompt.size());
  if (prompt == 0) throw Error(Where{"", "", "prompt"}, "is empty");
  if (spec.max_tokens < 1) throw Error(Where{"", "", "max_tokens"}, "must be ≥ 1");
  const int64_t context = engine_.max_context();
  if (context > 0 && spec.max_tokens > context - prompt) {
    throw Error(Where{"", "", "max_tokens"}, "the prompt's " + std::to_string(prompt) + " tokens plus " +
                                                 std::to_string(spec.max_tokens) + " to generate exceed the context of " +
                                                 std::to_string(context) + " tokens");
  }
  const CacheGeometry& g = engine_.caches();
  // The cache holds prompt + max_tokens − 1 positions (the last token is never fed back).
  if (blocks_for(prompt + spec.max_tokens - 1, g.block_tokens) > g.kv_blocks) {
    throw Error(Where{"", "", "max_tokens"}, "the prompt's " + std::to_string(prompt) + " tokens plus " +
                                                 std::to_string(spec.max_tokens) + " to generate need more than the " +
                                                 std::to_string(g.kv_blocks) + " cache blocks of " +
                                                 std::to_string(g.block_tokens) + " tokens");
  }
  validate(spec.sampling);
  std::lock_guard lock(mutex_);
  if (queued_ >= options_.max_queue) {
    throw Error(Where{"", "", "max_queue"}, "the queue holds " + std::to_string(queued_) + " waiting requests");
  }
  const int64_t id = next_id_++;
  inbox_.push_back(std::make_unique<Request>(id, std::move(spec), std::move(sink)));
  ++queued_;
  wake_.notify_all();
  return id;
}

void Scheduler::cancel(int64_t request) {
  std::lock_guard lock(mutex_);
  cancels_.push_back(request);
  wake_.notify_all();
}

void Scheduler::cancel_all(FinishReason reason) {
  take_inbox();
  std::vector<Request*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  for (Request* r : all) finish(*r, reason);
}

void Scheduler::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
}

bool Scheduler::idle() const {
  std::lock_guard lock(mutex_);
  return stats_.running == 0 && queued_ == 0 && inbox_.empty();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Scheduler::take_inbox() {
  std::vector<std::unique_ptr<Request>> fresh;
  std::vector<int64_t> cancels;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : fresh) {
    waiting_.push_back(r.get());
    requests_.emplace(r->id, std::move(r));
  }
  for (int64_t id : cancels) {
    auto it = requests_.find(id);
    if (it != requests_.end()) finish(*it->second, FinishReason::kCancelled);
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<Request*> late;
  for (auto& [id, r] : requests_) {
    if (r->spec.deadline && now > *r->spec.deadline) late.push_back(r.get());
  }
  for (Request* r : late) finish(*r, FinishReason::kTimeout);
}

void Scheduler::finish(Request& r, FinishReason reason, const std::string& error) {
  if (r.sequence >= 0) {
    engine_.free_sequence(r.sequence);
    r.sequence = -1;
    running_.erase(std::find(running_.begin(), running_.end(), &r));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), &r);
    if (it != waiting_.end()) {
      waiting_.erase(it);
      std::lock_guard lock(mutex_);
      --queued_;
    }
  }
  const std::shared_ptr<RequestSink> sink = r.sink;
  requests_.erase(r.id);  // r is gone from here on
  sink->on_finish(reason, error);
}

// Reserves `blocks` free cache blocks for a member of this step, giving back the prefix cache's
// unused blocks first, then preempting the most recently admitted sequences admitted after `keep`
// (none when keep is null: a new request preempts nobody). False when that is not enough.
bool Scheduler::make_room(int64_t blocks, const Request* keep) {
  BlockPool& pool = engine_.kv_pool();
  const auto free = [&] { return pool.free_count() - reserved_; };
  if (free() < blocks && cache_) cache_->evict(blocks - free());
  while (free() < blocks && keep != nullptr && !running_.empty() && running_.back() != keep) {
    Request* victim = running_.back();
    if (victim->in_step) break;  // already part of this step
    preempt(*victim);
  }
  if (free() < blocks) return false;
  reserved_ += blocks;
  return true;
}

void Scheduler::preempt(Request& r) {
  engine_.free_sequence(r.sequence);
  r.sequence = -1;
  r.prefilled = 0;
  r.fed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  waiting_.push_front(&r);
  std::lock_guard lock(mutex_);
  ++queued_;
  ++stats_.preemptions;
}

// The end of the request's next prompt piece within `budget`; with a prefix cache on a hybrid
// model a piece also ends at the prompt's last snapshot boundary (the deepest block a later
// request can resume from, which leaves it two tokens to compute).
int64_t Scheduler::piece_end(int64_t prefilled, int64_t total, int64_t budget) const {
  int64_t end = next_prefill_end(prefilled, total, budget);
  if (cache_ && hybrid_) {
    const int64_t last = (total - 2) / kPrefillAlign * kPrefillAlign;
    if (last > prefilled && last < end) end = last;
  }
  return end;
}

bool Scheduler::admit(Request& r, int64_t budget) {
  if (engine_.live_sequences() >= engine_.caches().state_slots) return false;
  const int64_t total = r.prompt_tokens();
  PrefixCache::Match hit;
  if (cache_ && total >= 2) hit = cache_->match(r.spec.prompt, total - 2, hybrid_);
  const auto give_back = [&] {
    for (const PrefixCache::Block& b : hit.blocks) {
      engine_.kv_pool().release(b.page);
      if (b.snapshot >= 0) engine_.snapshot_pool().release(b.snapshot);
    }
  };
  const int64_t start = hit.tokens;
  if (budget < std::min(total - start, kPrefillAlign)) {
    give_back();
    return false;
  }
  const int64_t end = piece_end(start, total, budget);
  const int64_t need = blocks_for(end, engine_.caches().block_tokens) - static_cast<int64_t>(hit.blocks.size());
  if (!make_room(need, nullptr)) {
    give_back();
    return false;
  }
  std::vector<int32_t> pages;
  int32_t snapshot = -1;
  for (size_t i = 0; i < hit.blocks.size(); ++i) {
    pages.push_back(hit.blocks[i].page);
    if (hit.blocks[i].snapshot >= 0) {
      if (i + 1 == hit.blocks.size() && hybrid_) {
        snapshot = hit.blocks[i].snapshot;
      } else {
        engine_.snapshot_pool().release(hit.blocks[i].snapshot);
      }
    }
  }
  r.sequence = engine_.new_sequence(std::move(pages), start, snapshot);
  r.prefilled = start;
  r.fed = 0;
  running_.push_back(&r);
  {
    std::lock_guard lock(mutex_);
    --queued_;
    stats_.prefix_query_tokens += total;
    stats_.prefix_hit_tokens += start;
  }
  r.sink->on_admitted(start);
  return true;
}

void Scheduler::offer_prompt_blocks(Request& r, int64_t end) {
  if (!cache_) return;
  const int64_t B = engine_.caches().block_tokens, whole = end / B;
  if (whole == 0) return;
  int32_t snapshot = -1;
  if (hybrid_) {
    if (end % B != 0) return;  // a hybrid's blocks are only useful up to a snapshot
    snapshot = engine_.save_snapshot(r.sequence);
    if (snapshot < 0 && cache_->evict(1) > 0) snapshot = engine_.save_snapshot(r.sequence);
    if (snapshot < 0) return;
  }
  const std::vector<int32_t>& table = engine_.sequence_blocks(r.sequence);
  std::vector<PrefixCache::Block> blocks(static_cast<size_t>(whole));
  for (int64_t i = 0; i < whole; ++i) blocks[static_cast<size_t>(i)].page = table[static_cast<size_t>(i)];
  blocks.back().snapshot = snapshot;
  cache_->insert(std::span(r.spec.prompt).first(static_cast<size_t>(whole * B)), blocks);
  if (snapshot >= 0) engine_.snapshot_pool().release(snapshot);
  if (options_.prefix_cache_blocks > 0 && cache_->cached_blocks() > options_.prefix_cache_blocks) {
    cache_->evict(cache_->cached_blocks() - options_.prefix_cache_blocks);
  }
}

void Scheduler::after_step(Request& r, const StepResult& result, int64_t ran) {
  if (r.prefilling()) {
    r.prefilled += ran;
    offer_prompt_blocks(r, r.prefilled);
    if (r.prefilling() || !r.generated.empty()) return;  // more prompt, or tokens to replay
  } else if (++r.fed < static_cast<int64_t>(r.generated.size())) {
    return;  // replaying after a preemption
  }
  // At the frontier: sample the next token.
  GeneratedToken token;
  if (result.logits.empty()) {
    token.id = result.picked;
    r.sampler.observe(token.id);
  } else {
    if (r.spec.constraint) {
      token.id = sample_within_budget(r.sampler, result.logits, r.allowed, *r.spec.constraint, r.tokens_left());
      r.spec.constraint->accept(token.id);
    } else {
      token.id = r.sampler.next(result.logits, r.allowed);
    }
  }
  if (r.spec.top_logprobs >= 0) token.logprobs = logprobs_of(result.logits, token.id, r.spec.top_logprobs);
  token.stop = std::find(r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end(), token.id) != r.spec.stop_token_ids.end();
  token.closed_to_fit = token.stop && r.spec.constraint && r.spec.constraint->budget_steered();
  r.generated.push_back(token.id);
  const bool more = r.sink->on_token(token);
  if (token.stop || !more) {
    finish(r, token.closed_to_fit ? FinishReason::kLength : FinishReason::kStop);
  } else if (static_cast<int64_t>(r.generated.size()) >= r.spec.max_tokens) {
    finish(r, FinishReason::kLength);
  }
}

bool Scheduler::step_once() {
  take_inbox();
  reserved_ = 0;
  int64_t budget = options_.max_batch_tokens;
  std::vector<SequenceInput> inputs;
  std::vector<Request*> members;
  StepReport report;
  const auto add = [&](Request& r, std::vector<int64_t> tokens) {
    budget -= static_cast<int64_t>(tokens.size());
    r.in_step = true;
    const bool samples = r.samples_after(static_cast<int64_t>(tokens.size()));
    SequenceInput in{r.sequence, std::move(tokens), false, !(samples && r.needs_logits()), std::nullopt};
    // Sampling without logprobs runs where the logits are when the executor can.
    if (samples && r.needs_logits() && r.spec.top_logprobs < 0 && !r.spec.constraint && engine_.samples_on_device()) {
      in.device_sample = r.sampler.device_row();
    }
    members.push_back(&r);
    inputs.push_back(std::move(in));
  };
  // Running sequences in admission order: decode tokens (and replays), then prompt pieces.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    if (r.prefilling()) continue;
    if (!make_room(engine_.blocks_needed(r.sequence, 1), &r)) continue;
    add(r, {r.generated[static_cast<size_t>(r.fed)]});
    ++report.decode_tokens;
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    if (!r.prefilling() || budget < std::min(r.prompt_tokens() - r.prefilled, kPrefillAlign)) continue;
    const int64_t end = piece_end(r.prefilled, r.prompt_tokens(), budget);
    if (!make_room(engine_.blocks_needed(r.sequence, end - r.prefilled), &r)) continue;
    add(r, std::vector<int64_t>(r.spec.prompt.begin() + r.prefilled, r.spec.prompt.begin() + end));
  }
  // Admission, in arrival order.
  while (!waiting_.empty() && budget > 0) {
    Request& r = *waiting_.front();
    waiting_.pop_front();
    if (!admit(r, budget)) {
      waiting_.push_front(&r);
      break;
    }
    const int64_t end = piece_end(r.prefilled, r.prompt_tokens(), budget);
    add(r, std::vector<int64_t>(r.spec.prompt.begin() + r.prefilled, r.spec.prompt.begin() + end));
  }
  if (inputs.empty()) {
    publish_stats(false);  // cancels and timeouts may have freed blocks and slots
    return false;
  }
  for (const SequenceInput& in : inputs) report.tokens += static_cast<int64_t>(in.tokens.size());
  report.sequences = static_cast<int64_t>(inputs.size());
  report.prefill_tokens = report.tokens - report.decode_tokens;
  // The constrained rows' masks: on a worker thread while a device runs the forward pass; before
  // it on the CPU backend, whose forward pass occupies every core.
  std::vector<Request*> constrained;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i]->spec.constraint && !inputs[i].argmax_only) constrained.push_back(members[i]);
  }
  const size_t words = static_cast<size_t>((engine_.config().vocab_size + 31) / 32);
  const auto fill_masks = [&constrained, words] {
    for (Request* r : constrained) {
      r->allowed.assign(words, 0u);
      r->spec.constraint->allowed_tokens(r->allowed, r->tokens_left());
    }
  };
  std::future<void> masks;
  if (!constrained.empty()) {
    masks = std::async(engine_.samples_on_device() ? std::launch::async : std::launch::deferred, fill_masks);
    if (!engine_.samples_on_device()) masks.wait();
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<StepResult> results;
  std::string error;
  try {
    results = engine_.step(inputs);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (masks.valid()) {
    try {
      masks.get();
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < members.size(); ++i) {
    Request& r = *members[i];
    r.in_step = false;
    if (!error.empty()) {
      finish(r, FinishReason::kError, error);
    } else {
      after_step(r, results[i], static_cast<int64_t>(inputs[i].tokens.size()));
    }
  }
  publish_stats(true);
  if (observer_) observer_(report);
  return true;
}

void Scheduler::publish_stats(bool stepped) {
  std::lock_guard lock(mutex_);
  if (stepped) ++stats_.steps;
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = queued_;
  stats_.kv_blocks_used = engine_.kv_pool().used_count();
  stats_.kv_blocks_free = engine_.kv_pool().free_count();
  stats_.state_slots_used = engine_.live_sequences();
  stats_.cached_blocks = cache_ ? cache_->cached_blocks() : 0;
}

void Scheduler::run_until_stopped() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (stopping_) return;
    }
    if (step_once()) continue;
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_ || !inbox_.empty() || !cancels_.empty(); });
  }
}

}  // namespace k3
