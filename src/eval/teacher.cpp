#include "eval/teacher.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/prefill_chunks.h"

namespace k3::eval {
namespace {

// A sequence being forced: tokens [0, total) = prompt + reply without the reply's last token;
// positions from `first_logit` on predicted the reply.
struct Active {
  size_t index = 0;
  int64_t sequence = 0;
  int64_t done = 0, total = 0, first_logit = 0;
  std::vector<float> rows;
};

int64_t token_at(const ForcedSequence& s, int64_t pos) {
  const int64_t p = static_cast<int64_t>(s.prompt.size());
  return pos < p ? s.prompt[static_cast<size_t>(pos)] : s.reply[static_cast<size_t>(pos - p)];
}

// Frees the engine sequences still active when a step throws.
struct FreeOnExit {
  Engine& engine;
  std::vector<Active>& active;
  ~FreeOnExit() {
    for (const Active& a : active) engine.free_sequence(a.sequence);
  }
};

}  // namespace

void teacher_force(Engine& engine, std::span<const ForcedSequence> sequences, const ForcingOptions& options,
                   const ForcedRowsSink& sink) {
  const CacheGeometry& g = engine.caches();
  for (const ForcedSequence& s : sequences) {
    if (s.prompt.empty() || s.reply.empty()) throw Error(Where{"", "", "eval"}, "a forced sequence needs a prompt and a reply");
    const int64_t total = static_cast<int64_t>(s.prompt.size() + s.reply.size()) - 1;
    check_context(engine.max_context(), total, 0, "--max-context");
    if (blocks_for(total, g.block_tokens) > g.kv_blocks) {
      throw Error(Where{"", "", "eval"}, "a sequence of " + std::to_string(total) + " tokens needs more than the " +
                                             std::to_string(g.kv_blocks) + " cache blocks");
    }
  }
  const int64_t vocab = engine.config().vocab_size;
  const int64_t logit_chunk = std::max<int64_t>(1, std::min(engine.prefill_chunk(), options.max_logit_rows));
  std::vector<Active> active;
  FreeOnExit guard{engine, active};
  size_t next = 0;
  while (next < sequences.size() || !active.empty()) {
    int64_t reserved = 0;
    for (const Active& a : active) reserved += engine.blocks_needed(a.sequence, a.total - a.done);
    while (next < sequences.size() && engine.live_sequences() < g.state_slots) {
      const ForcedSequence& s = sequences[next];
      Active a{next, 0, 0, static_cast<int64_t>(s.prompt.size() + s.reply.size()) - 1,
               static_cast<int64_t>(s.prompt.size()) - 1, {}};
      const int64_t need = blocks_for(a.total, g.block_tokens);
      if (engine.kv_pool().free_count() - reserved < need) break;
      a.sequence = engine.new_sequence();
      reserved += need;
      active.push_back(std::move(a));
      ++next;
    }
    if (active.empty()) throw Error(Where{"", "", "eval"}, "no state slot or cache block is free for a forced sequence");
    std::vector<SequenceInput> inputs;
    std::vector<int64_t> ends;
    int64_t tokens = 0, rows = 0;
    for (const Active& a : active) {
      const bool logits = a.done >= a.first_logit;
      const int64_t end = logits ? next_prefill_end(a.done, a.total, logit_chunk)
                                 : next_prefill_end(a.done, a.first_logit, engine.prefill_chunk());
      const int64_t n = end - a.done;
      if (!inputs.empty() && (tokens + n > options.max_batch_tokens || rows + (logits ? n : 0) > options.max_logit_rows)) break;
      SequenceInput in{a.sequence, {}, logits, !logits};
      for (int64_t pos = a.done; pos < end; ++pos) in.tokens.push_back(token_at(sequences[a.index], pos));
      inputs.push_back(std::move(in));
      ends.push_back(end);
      tokens += n;
      rows += logits ? n : 0;
    }
    const std::vector<StepResult> results = engine.step(inputs);
    for (size_t i = 0; i < results.size(); ++i) {
      Active& a = active[i];
      if (inputs[i].all_logits) {
        if (static_cast<int64_t>(results[i].logits.size()) != results[i].rows * vocab || results[i].rows != ends[i] - a.done) {
          throw Error(Where{"", "", "eval"}, "the engine returned " + std::to_string(results[i].rows) + " logit rows for a piece of " +
                                                 std::to_string(ends[i] - a.done) + " tokens");
        }
        a.rows.insert(a.rows.end(), results[i].logits.begin(), results[i].logits.end());
      }
      a.done = ends[i];
    }
    for (size_t i = 0; i < active.size();) {
      if (active[i].done < active[i].total) {
        ++i;
        continue;
      }
      sink(active[i].index, active[i].rows);
      engine.free_sequence(active[i].sequence);
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

}  // namespace k3::eval
