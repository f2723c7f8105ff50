// Shared inputs of the op-parity cases: the make-tiny checkpoint of every family (written once per
// process, planned), its weights bound per target, the float64 view of its parameters, and
// deterministic random activations.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/backend.h"
#include "backend/cpu/weights.h"
#include "harness.h"
#include "model/reference_forward.h"
#include "model/tiny_config.h"
#include "quant/families/family.h"
#include "quant/plan/materialize.h"

namespace k3::op_parity {

// One family × architecture of `k3 make-tiny`.
struct TinyId {
  FamilyId family;
  TinyArch arch;
  std::string label() const;  // "bf16/kimi-k3"
  std::string safe() const;   // "bf16_k3"
};
std::vector<TinyId> all_tiny_ids();

// A tiny checkpoint, written and planned on first use; `error` is set instead when the family cannot
// express the architecture (the writer's message).
struct Tiny {
  std::string dir, error;
  K3Config config;
  LoadPlan plan;
  std::unique_ptr<PlanFiles> files;
};
Tiny& tiny(const TinyId& id);

// The tiny checkpoint's weights bound under `target` (K3_CPU_ISA set while binding), kept.
const ModelWeights& bound_weights(const TinyId& id, const Target& target);

// The float64 reference's view of the checkpoint: materialize() of each parameter, and the format
// activation rule of its weights (reference_forward.h).
reference::WeightSource weight_source(const TinyId& id);
reference::ActivationRule activation_rule(const TinyId& id);

// The CPU backend (backend/cpu/backend.h) every CPU case runs its op through, where the interface
// has the op.
Backend& cpu_backend();

// Column key of a scheme in the coverage matrix (format_columns()).
std::string format_column(const Scheme& scheme);

// The coverage columns of the linears (Linear and ExpertBank parameters) named by the prefixes.
std::vector<std::string> formats_under(const LoadPlan& plan, const std::vector<std::string>& prefixes);

// N(0, sigma) values, deterministic per seed; row t scaled by 2^((t mod 5) − 2) when `vary_rows`
// (per-token scales exercise per-token activation quantisation).
std::vector<float> random_values(int64_t rows, int64_t cols, uint32_t seed, double sigma = 1.0, bool vary_rows = false);

// A Tensor over values [rows, cols].
Tensor tensor_of(const std::vector<float>& values, int64_t rows, int64_t cols);
std::vector<std::vector<double>> rows_of(const std::vector<float>& values, int64_t rows, int64_t cols);
std::vector<double> flatten(const std::vector<std::vector<double>>& rows);

}  // namespace k3::op_parity
