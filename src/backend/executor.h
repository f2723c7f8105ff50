// The interface every device implements under the Engine (runtime/engine.h): the bound weights, the
// serving caches and each sequence's state, and one batched forward call over the next tokens of
// several sequences. The CPU executor runs backend/cpu/forward.h; the CUDA one is
// backend/cuda/executor/cuda_model.h.
//
// Caches: the MLA latent cache is paged — `kv_blocks` blocks of `block_tokens` positions, each one
// page per MLA layer; the Engine hands out block ids (runtime/block_pool.h) and passes every
// sequence's block table with each call. Each running sequence holds one KDA state slot (recurrent
// and conv state of every KDA layer), taken at add_sequence and given back at free_sequence.
// Snapshots copy a sequence's KDA states into one of `snapshot_slots` slots, by id, and back: what
// the prefix cache keeps at block boundaries.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3 {

// One sequence's rows [row0, row0 + n) of a batch; `blocks` covers its positions up to length + n.
struct BatchSlice {
  int64_t sequence = 0;
  int64_t row0 = 0, n = 0;
  const std::vector<int32_t>* blocks = nullptr;
};

struct CacheGeometry {
  int64_t block_tokens = 64;     // positions per block (a multiple of the KDA chunk, 64)
  int64_t kv_blocks = 0;         // blocks of the paged latent cache
  int64_t state_slots = 0;       // sequences that can run at once (KDA state slots)
  int64_t snapshot_slots = 0;    // KDA state snapshots that can be kept (0: no prefix cache on hybrids)
  uint64_t kv_block_bytes = 0;   // memory of one block (all MLA layers)
  uint64_t state_bytes = 0;      // memory of one KDA state slot (or snapshot)
  // Whether the executor reads the block tables it is given. One that does not keeps each
  // sequence's cache in its own slot and cannot share pages (no prefix cache).
  bool paged = true;
};

// One logits row's sampling where the logits are (Executor::run_sample). The draw `u` comes from the
// request's own seeded generator, so a seed gives the same tokens on the same device; the pick is
// the token where u × (the kept mass) falls in the cumulative distribution taken in id order.
struct RowSampling {
  bool greedy = true;         // the largest logit (lowest id on ties); the rest is unused
  float temperature = 1.0f;
  int32_t top_k = 0;          // 0: no limit; ties at the k-th value are all kept
  float top_p = 1.0f, min_p = 0.0f;
  double u = 0;               // uniform in [0, 1)
  // Logit penalties applied first: (id, amount) with amount = presence·[count > 0] + frequency·count.
  std::vector<std::pair<int32_t, float>> penalties;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual CacheGeometry caches() const = 0;
  // Takes a KDA state slot (zeroed) for a sequence whose first `length` positions are already in
  // its blocks (a prefix-cache hit; 0 for a new sequence); throws k3::Error when none is free.
  virtual void add_sequence(int64_t sequence, int64_t length) = 0;
  virtual void free_sequence(int64_t sequence) = 0;
  // Runs `ids` (sequence after sequence, covered in order by `slices`, all validated by the Engine),
  // advances each sequence's state and returns the logits of `logit_rows`, [rows, vocab].
  virtual Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                     std::span<const int64_t> logit_rows) = 0;
  // run(), returning only each logit row's largest column (lowest on ties; −1 for a row holding a
  // NaN or an infinity) — the greedy next tokens. A device executor picks them where the logits
  // are and copies back one id per row; this default picks them from run()'s logits.
  virtual std::vector<int64_t> run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                          std::span<const int64_t> logit_rows);
  // Whether run_sample picks tokens where the logits are (else the caller samples run()'s logits).
  virtual bool samples_on_device() const { return false; }
  // run(), returning row i's token drawn by `sampling[i]` (−1 for a row holding a NaN or an
  // infinity). Only executors that sample on the device implement it.
  virtual std::vector<int64_t> run_sample(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                          std::span<const int64_t> logit_rows, std::span<const RowSampling> sampling);
  // Copies the sequence's KDA states into snapshot slot `snapshot`, or from it (the sequence then
  // continues from the snapshot's position; its MLA pages come from its block table).
  virtual void save_snapshot(int64_t sequence, int32_t snapshot) = 0;
  virtual void restore_snapshot(int64_t sequence, int32_t snapshot) = 0;
};

// The greedy pick of each row of `logits` [rows, vocab], as run_argmax documents.
std::vector<int64_t> argmax_rows(const Tensor& logits);

// Block tables for callers that drive an Executor directly (benchmarks, tests) rather than through
// the Engine: table i of `sequences` lists blocks [i·per, (i+1)·per), none shared.
inline std::vector<std::vector<int32_t>> disjoint_block_tables(int64_t sequences, int64_t per) {
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(sequences));
  for (int64_t i = 0; i < sequences; ++i) {
    for (int64_t b = 0; b < per; ++b) tables[static_cast<size_t>(i)].push_back(static_cast<int32_t>(i * per + b));
  }
  return tables;
}

// Binds a planned checkpoint for a device. `files` outlives the executor.
using ExecutorFactory = std::function<std::unique_ptr<Executor>(const K3Config&, const LoadPlan&, PlanFiles&)>;

}  // namespace k3
