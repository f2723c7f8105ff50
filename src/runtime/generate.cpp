#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "core/error.h"
#include "runtime/prefill_chunks.h"

namespace k3 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void check_context(int64_t limit, int64_t prompt_tokens, int64_t max_tokens, const std::string& field) {
  if (limit <= 0 || (prompt_tokens <= limit && max_tokens <= limit - prompt_tokens)) return;
  std::string what = "the prompt's " + std::to_string(prompt_tokens) + " tokens";
  if (max_tokens > 0) what += " plus " + std::to_string(max_tokens) + " tokens to generate";
  throw Error(Where{"", "", field}, what + " exceed the context limit of " + std::to_string(limit) + " tokens");
}

StepResult prefill(Engine& engine, int64_t sequence, const std::vector<int64_t>& prompt, bool all_logits,
                   const PrefillProgress& progress, int64_t chunk) {
  if (prompt.empty()) throw Error(Where{"", "", "ids"}, "the prompt is empty");
  if (chunk == 0) chunk = engine.prefill_chunk();
  if (chunk < 1) throw Error(Where{"", "", "chunk"}, "must be ≥ 1");
  check_context(engine.max_context(), static_cast<int64_t>(prompt.size()), 0, "max_context");
  const int64_t total = static_cast<int64_t>(prompt.size());
  StepResult result;
  result.sequence = sequence;
  for (int64_t done = 0; done < total;) {
    const int64_t n = next_prefill_end(done, total, chunk) - done;
    const bool last = done + n == total;
    SequenceInput in{sequence, std::vector<int64_t>(prompt.begin() + done, prompt.begin() + done + n), all_logits};
    StepResult r = std::move(engine.step({std::move(in)}).front());
    if (all_logits) {
      result.rows += r.rows;
      result.logits.insert(result.logits.end(), r.logits.begin(), r.logits.end());
    } else if (last) {
      result.rows = r.rows;
      result.logits = std::move(r.logits);
    }
    done += n;
    if (progress) progress(done, total);
  }
  return result;
}

GenerateResult generate(Engine& engine, const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  if (prompt.empty()) throw Error(Where{"", "", "ids"}, "the prompt is empty");
  if (options.max_tokens < 0) throw Error(Where{"", "", "max_tokens"}, "must be ≥ 0");
  Sampler sampler(options.sampling);
  const std::vector<int64_t>& eos = engine.config().tokens.eos;
  GenerateResult r;
  if (options.max_tokens == 0) return r;
  check_context(engine.max_context(), static_cast<int64_t>(prompt.size()), options.max_tokens, "max_context");
  const int64_t seq = engine.new_sequence();
  // A constraint's mask for the next token: computed while a device runs the forward pass; before
  // it on the CPU backend, whose forward pass occupies every core.
  std::vector<uint32_t> allowed;
  const auto start_mask = [&]() -> std::future<void> {
    if (!options.constraint) return {};
    std::future<void> f = std::async(engine.samples_on_device() ? std::launch::async : std::launch::deferred, [&] {
      allowed.assign(static_cast<size_t>((engine.config().vocab_size + 31) / 32), 0u);
      options.constraint->allowed_tokens(allowed, options.max_tokens - static_cast<int64_t>(r.ids.size()));
    });
    if (!engine.samples_on_device()) f.wait();
    return f;
  };
  auto t0 = std::chrono::steady_clock::now();
  std::future<void> mask = start_mask();
  std::vector<StepResult> out{prefill(engine, seq, prompt, false, options.on_prefill)};
  r.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  while (true) {
    if (mask.valid()) mask.get();
    int64_t next;
    if (options.constraint) {
      next = sample_within_budget(sampler, out.front().logits, allowed, *options.constraint,
                                  options.max_tokens - static_cast<int64_t>(r.ids.size()));
      options.constraint->accept(next);
    } else {
      next = sampler.next(out.front().logits, allowed);
    }
    r.ids.push_back(next);
    if (options.on_token) options.on_token(next);
    if (options.stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      r.stopped_at_eos = true;
      break;
    }
    if (static_cast<int64_t>(r.ids.size()) >= options.max_tokens) break;
    mask = start_mask();
    out = engine.step({{seq, {next}, false}});
    ++r.decode_steps;
  }
  r.decode_seconds = seconds_since(t0);
  engine.free_sequence(seq);
  return r;
}

}  // namespace k3
