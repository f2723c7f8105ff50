// Linear weights of every scheme at odd shapes, which the make-tiny dimensions (multiples of 16 and
// 256) never produce: the producer rules of quant/formats quantize N(0, 0.05) weights, the bytes go
// into one raw file, and a one-parameter LoadPlan binds them with the roles, dtypes and scheme a
// family's planner would give them — so make_cpu_linear and materialize() read them exactly as they
// read checkpoint weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/plan/load_plan.h"
#include "quant/plan/plan_files.h"

namespace k3::op_parity {

struct SyntheticSpec {
  Scheme scheme;
  int64_t n = 0, k = 0;  // the odd shape: odd N (and K) wherever the format allows
  std::string why;       // what bounds the shape
};
// Every scheme of the CPU backend: BF16, F16, F32, FP8 per tensor and per 128×128 block, NVFP4,
// MXFP4, ModelSlim W4A8 (per channel / per group, packed / unpacked) and W8A8 (dynamic / static),
// GGUF Q4_0, Q8_0 and the K-quants Q2_K … Q6_K.
std::vector<SyntheticSpec> synthetic_specs();

struct SyntheticLinear {
  LoadPlan plan;  // one file, one parameter "synthetic.weight" [n, k]
  std::unique_ptr<PlanFiles> files;
};
// Written under TempDir() on first use, then kept.
SyntheticLinear& synthetic_linear(const SyntheticSpec& spec);

}  // namespace k3::op_parity
