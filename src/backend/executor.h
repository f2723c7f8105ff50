// The interface every device implements under the Engine (runtime/engine.h): the bound weights and
// each sequence's state, and one batched forward call over the next tokens of several sequences.
// The CPU executor runs backend/cpu/forward.h; the CUDA one is backend/cuda/executor/cuda_model.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "model/config.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3 {

// One sequence's rows [row0, row0 + n) of a batch.
struct BatchSlice {
  int64_t sequence = 0;
  int64_t row0 = 0, n = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void add_sequence(int64_t sequence) = 0;
  virtual void free_sequence(int64_t sequence) = 0;
  // Runs `ids` (sequence after sequence, covered in order by `slices`, all validated by the Engine),
  // advances each sequence's state and returns the logits of `logit_rows`, [rows, vocab].
  virtual Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                     std::span<const int64_t> logit_rows) = 0;
};

// Binds a planned checkpoint for a device. `files` outlives the executor.
using ExecutorFactory = std::function<std::unique_ptr<Executor>(const K3Config&, const LoadPlan&, PlanFiles&)>;

}  // namespace k3
