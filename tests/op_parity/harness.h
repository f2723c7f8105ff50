// The op-parity harness: every coarse op of the backend interface (backend/cpu/backend.h,
// backend/cpu/ops.h) × every weight format × a few shapes, run on every target and checked against a
// float64 reference, plus agreement of all targets with each other.
//
// Pieces (one file each):
//   harness.{h,cpp}      targets, cases, the check, the coverage matrix (--list);
//   tolerances.h         one named tolerance per op, with the reason for its size;
//   fixtures.{h,cpp}     tiny checkpoints of every family, their weights bound per target, inputs;
//   synthetic_linear.*   odd-shaped linear weights of every scheme, bound like checkpoint weights;
//   linear_cases.cpp     linear over every scheme (tiny-checkpoint and odd shapes);
//   pointwise_cases.cpp  rms_norm, attn_res_mix_norm, gated activation, route;
//   block_cases.cpp      kda, mla (prefill + decode), moe, mlp per family against reference_forward;
//   main.cpp             the gtest suites (one per op) and the --list entry point.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::op_parity {

// ---- targets --------------------------------------------------------------------------------
// A backend the harness checks. Every CPU kernel tier this host runs is one target; a CPU target
// is made current by K3_CPU_ISA, which every kernel choice (cpu::selected_isa()) reads when a weight
// is bound, so tier-dispatched code anywhere below the ops is covered without the harness knowing
// where it is.
//
// The CUDA target (TargetKind::Cuda, last) exists when k3 is built with K3_CUDA and a device is
// present at run time: each case's `run` then calls the CUDA backend's kernels for the op through
// cuda_ops.h (implemented in tests/op_parity/cuda/, compiled only with K3_CUDA). It is checked against
// the case's CUDA reference (OpCase::cuda_reference, or `reference` with cuda_tolerance) — bf16
// activations and FP8 / int8 activation quantisation need their own allowances (tolerances.h).
enum class TargetKind { Cpu, Cuda };

struct Target {
  std::string name;  // gtest-name safe: "scalar", "avx2", "avx512", "cuda"
  TargetKind kind = TargetKind::Cpu;
  cpu::CpuIsa isa = cpu::CpuIsa::Scalar;
};

// Why there is no CUDA target ("" when there is one): not built with K3_CUDA, or no device.
std::string cuda_absent_reason();

// Every target of this host, the first being the one all others are compared with.
const std::vector<Target>& targets();

// Makes `target` current while alive (K3_CPU_ISA for CPU targets; nothing for CUDA), restoring the
// previous setting.
class ScopedTarget {
 public:
  explicit ScopedTarget(const Target& target);
  ~ScopedTarget();
  ScopedTarget(const ScopedTarget&) = delete;
  ScopedTarget& operator=(const ScopedTarget&) = delete;

 private:
  bool cpu_ = true;
  bool had_ = false;
  std::string previous_;
};

// ---- cases ------------------------------------------------------------------------------------
// What a case's output must match. Rows are tokens (or rows of the op). Either `bound` (one absolute
// bound per value, derived from the operands: the linear op) or `tolerance` (per row: max |Δ| ≤
// tolerance · max |want| of that row). Values at `exact` positions must be equal (route's expert ids).
struct Expectation {
  std::vector<double> want;
  int64_t row_width = 0;
  std::vector<double> bound;
  double tolerance = 0;
  std::vector<size_t> exact;
  std::string note;  // how the reference was made (printed with a failure)
};

// The CUDA target's expectation when a case has no cuda_reference: `e` with its allowance replaced by
// a per-row tolerance.
Expectation with_tolerance(Expectation e, double tolerance, const std::string& why);

// The outcome of one comparison: the worst row's error over its allowance (≤ 1 passes).
struct Verdict {
  double worst_ratio = 0;       // max over rows of error / allowance
  double worst_relative = 0;    // max over rows of max|Δ| / max|want| (for the record)
  std::string failure;          // empty when the check passes
};
Verdict compare(const Expectation& e, const std::vector<float>& got);
// Two targets' outputs against each other, with the reference's allowance.
Verdict agree(const Expectation& e, const std::vector<float>& a, const std::vector<float>& b);

// One case: an op on one weight format at one shape, run on every target. Reference and runs are
// evaluated on first use and kept (the first target's output is reused by every agreement check).
struct OpCase {
  std::string op;       // "linear", "rms_norm", … (the row of the coverage matrix)
  std::vector<std::string> formats;  // coverage columns this case exercises (block ops: several)
  std::string name;     // gtest-safe case name without the target: "GGUF_q4_K__odd_37x512__m3"
  std::string shape;    // shape label of the coverage details: "37x512 m3", "p37+d1", "rows37"
  std::string source;   // where the weights come from: "odd", "tiny bf16/kimi-k3 L1 q_proj", …
  std::string skip;     // non-empty: the combination cannot be expressed (reason), test skipped
  std::function<Expectation()> reference;
  std::function<std::vector<float>(const Target&)> run;
  // The CUDA target: skipped with this reason when non-empty (a shape its kernels do not take);
  // else checked against cuda_reference when set (another activation contract: no agreement check
  // with the first target then), or against `reference` under cuda_tolerance (per row) and agreement.
  std::string cuda_skip;
  std::function<Expectation()> cuda_reference;
  double cuda_tolerance = 0;
};

// Every case of every op (built once; cheap closures, the work happens in reference/run).
const std::vector<OpCase>& all_cases();

// Registration of each op's cases (one file each).
std::vector<OpCase> linear_cases();
std::vector<OpCase> pointwise_cases();
std::vector<OpCase> block_cases();

// Runs case `index` on target `target` and checks it (gtest assertions): the reference comparison,
// then agreement with the first target.
void run_case(size_t index, size_t target);

// ---- coverage ---------------------------------------------------------------------------------
// The coverage matrix: rows ops, columns weight formats, cells cases × targets (see main.cpp).
void print_coverage(std::ostream& out);

// The column key of coverage for a format name used by cases (fixed order, see harness.cpp).
const std::vector<std::string>& format_columns();

// Name helpers: gtest-safe spelling (letters, digits, '_').
std::string safe_name(const std::string& s);

}  // namespace k3::op_parity
