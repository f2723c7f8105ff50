#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace k3 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateResult generate(Engine& engine, const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  if (prompt.empty()) throw Error(Where{"", "", "ids"}, "the prompt is empty");
  if (options.max_tokens < 0) throw Error(Where{"", "", "max_tokens"}, "must be ≥ 0");
  Sampler sampler(options.sampling);
  const std::vector<int64_t>& eos = engine.config().tokens.eos;
  GenerateResult r;
  if (options.max_tokens == 0) return r;
  const int64_t seq = engine.new_sequence();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<StepResult> out = engine.step({{seq, prompt, false}});
  r.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  while (true) {
    const int64_t next = sampler.next(out.front().logits);
    r.ids.push_back(next);
    if (options.on_token) options.on_token(next);
    if (options.stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      r.stopped_at_eos = true;
      break;
    }
    if (static_cast<int64_t>(r.ids.size()) >= options.max_tokens) break;
    out = engine.step({{seq, {next}, false}});
    ++r.decode_steps;
  }
  r.decode_seconds = seconds_since(t0);
  engine.free_sequence(seq);
  return r;
}

}  // namespace k3
