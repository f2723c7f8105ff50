// An independent float64 reference of the Kimi-Linear / Kimi-K3 text forward pass (spec
// k3-architecture.md §2–§8): plain loops over dequantized weights, one sequence, full prefill,
// token-by-token KDA recurrence, full causal MLA. Shares no code with the engine's kernels; it is
// the oracle the fast paths are tested against.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace k3::reference {

// Returns a parameter (logical name) as float64, row-major in its inventory shape.
using WeightSource = std::function<std::vector<double>(const std::string&)>;

// The activation numerics a checkpoint format itself defines for the input of a linear weight
// (e.g. ModelSlim's int8 per-token quantisation): replaces x by the values that format multiplies.
// Empty, or a no-op for a parameter, means float activations.
using ActivationRule = std::function<void(const std::string& weight, std::vector<double>& x)>;

// Logits [T, vocab], row-major.
std::vector<double> forward(const K3Config& config, const WeightSource& weights, const std::vector<int64_t>& ids,
                            const ActivationRule& rule = {});

}  // namespace k3::reference
