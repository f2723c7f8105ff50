// The executor over synthetic weights (make_synthetic_cuda_executor, `k3 bench --synthetic`) at
// make-tiny's small shapes of both architectures: a batched prefill and decode steps (eager, graph
// capture, replays) give finite logits of unit scale (the 1/K variance of the generated matrices),
// identical for the same seed and different for another. Per-op profiling (set_cuda_op_profiling)
// changes no logit and splits the step's time over the op classes the model has.
#include <algorithm>
#include <cmath>
#include <span>

#include "backend/cuda/executor/cuda_model.h"
#include "cuda_test_util.h"
#include "io/json.h"
#include "model/tiny_config.h"

namespace k3::cuda {
namespace {

K3Config small_config(TinyArch arch) {
  return parse_k3_config(parse_json(tiny_config_json(arch, TinySize::Small).dump(), "tiny small config"));
}

// Two sequences prefilled in one step (20 and 9 tokens), then four batched decode steps; the logits
// of every step, one after the other.
std::vector<float> run_steps(const K3Config& config, uint64_t seed) {
  CudaOptions o;
  o.memory = "3G";
  o.max_sequences = 2;
  o.max_context = 128;
  const std::unique_ptr<Executor> ex = make_synthetic_cuda_executor(o, config, seed);
  const int64_t vocab = config.vocab_size;
  std::vector<int64_t> prompt(29);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>((i * 7919 + 11) % static_cast<size_t>(vocab));
  ex->add_sequence(0, 0);
  ex->add_sequence(1, 0);
  const auto tables = disjoint_block_tables(2, o.max_context / 64);
  const std::vector<BatchSlice> prefill = {{0, 0, 20, &tables[0]}, {1, 20, 9, &tables[1]}};
  const std::vector<int64_t> last_rows = {19, 28};
  std::vector<float> logits = ex->run(prompt, prefill, last_rows).data;
  const std::vector<BatchSlice> decode = {{0, 0, 1, &tables[0]}, {1, 1, 1, &tables[1]}};
  const std::vector<int64_t> rows = {0, 1};
  for (int step = 0; step < 4; ++step) {
    const std::vector<int64_t> ids = {prompt[static_cast<size_t>(step)], prompt[static_cast<size_t>(step + 20)]};
    const std::vector<float> more = ex->run(ids, decode, rows).data;
    logits.insert(logits.end(), more.begin(), more.end());
  }
  const CudaExecutorStats stats = cuda_executor_stats(*ex);
  EXPECT_GT(stats.weight_bytes, 0u);
  EXPECT_EQ(stats.graph_captures, 1);
  EXPECT_EQ(stats.graph_replays, 3);
  return logits;
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

class SyntheticModel : public ::testing::TestWithParam<TinyArch> {};

TEST_P(SyntheticModel, LogitsAreFiniteOfUnitScaleAndDeterministic) {
  K3_REQUIRE_GPU();
  const K3Config config = small_config(GetParam());
  const std::vector<float> a = run_steps(config, 7);
  ASSERT_EQ(a.size(), static_cast<size_t>(10 * config.vocab_size));
  double sum = 0, squares = 0;
  int64_t non_finite = 0;
  for (float x : a) {
    if (!std::isfinite(x)) {
      ++non_finite;
      continue;
    }
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  EXPECT_EQ(non_finite, 0);
  const double n = static_cast<double>(a.size()), mean = sum / n, stddev = std::sqrt(squares / n - mean * mean);
  EXPECT_GT(stddev, 0.3);
  EXPECT_LT(stddev, 3.0);
  EXPECT_EQ(differing(run_steps(config, 7), a), 0) << "the same seed gave other logits";
  EXPECT_GT(differing(run_steps(config, 8), a), 0) << "another seed gave the same logits";
}

// One sequence: a 24-token prefill and three decode steps, eager; the logits of every step.
std::vector<float> eager_steps(Executor& ex, int64_t vocab) {
  std::vector<int64_t> prompt(24);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>((i * 7919 + 5) % static_cast<size_t>(vocab));
  ex.add_sequence(0, 0);
  const auto tables = disjoint_block_tables(1, 2);
  const BatchSlice prefill{0, 0, 24, &tables[0]};
  const int64_t last = 23, row = 0;
  std::vector<float> logits = ex.run(prompt, std::span(&prefill, 1), std::span(&last, 1)).data;
  for (size_t step = 0; step < 3; ++step) {
    const BatchSlice decode{0, 0, 1, &tables[0]};
    const std::vector<int64_t> id = {prompt[step]};
    const std::vector<float> more = ex.run(id, std::span(&decode, 1), std::span(&row, 1)).data;
    logits.insert(logits.end(), more.begin(), more.end());
  }
  return logits;
}

TEST_P(SyntheticModel, ProfilingPerOpClassChangesNoLogitAndSplitsTheStep) {
  K3_REQUIRE_GPU();
  const K3Config config = small_config(GetParam());
  CudaOptions o;
  o.memory = "3G";
  o.max_sequences = 1;
  o.max_context = 128;
  const std::unique_ptr<Executor> profiled = make_synthetic_cuda_executor(o, config, 3);  // graphs allowed
  o.graphs = false;
  const std::unique_ptr<Executor> plain = make_synthetic_cuda_executor(o, config, 3);
  set_cuda_op_profiling(*profiled, true);
  EXPECT_EQ(differing(eager_steps(*profiled, config.vocab_size), eager_steps(*plain, config.vocab_size)), 0);
  const CudaExecutorStats s = cuda_executor_stats(*profiled);
  EXPECT_EQ(s.profiled_steps, 4);
  EXPECT_EQ(s.graph_captures, 0) << "a profiled step runs eagerly";
  EXPECT_EQ(cuda_executor_stats(*plain).profiled_steps, 0);
  auto t = [&](OpClass c) { return s.op_seconds[static_cast<size_t>(c)]; };
  // Every class the model runs took time; the ranks' exchanges and CPU experts it does not have took none.
  for (OpClass c : {OpClass::kNorms, OpClass::kKda, OpClass::kMla, OpClass::kDenseMlp, OpClass::kMoeRouter,
                    OpClass::kMoeLinears, OpClass::kMoeDispatch, OpClass::kMoeGemm1, OpClass::kMoeAct, OpClass::kMoeGemm2,
                    OpClass::kMoeCombine, OpClass::kSharedExperts, OpClass::kLmHead}) {
    EXPECT_GT(t(c), 0.0) << op_class_name(c);
  }
  EXPECT_EQ(t(OpClass::kCommunication), 0.0);
  EXPECT_EQ(t(OpClass::kCpuExperts), 0.0);
  // The picks of every MoE layer call: a decode step's token names exactly k distinct experts, the
  // 24-token prefill between k and E per layer.
  const int64_t L = config.count(FfnKind::kMoe), k = config.moe->experts_per_token, E = config.moe->num_experts;
  ASSERT_EQ(s.profiled_moe_layer_calls, 4 * L);
  const int64_t prefill_touched = s.touched_experts - 3 * L * k;
  EXPECT_GE(prefill_touched, L * k);
  EXPECT_LE(prefill_touched, L * E);
  // A decode token gives each of its experts one row; the prefill's busiest expert has 1 to 24.
  const int64_t prefill_busiest = s.busiest_expert_rows - 3 * L;
  EXPECT_GE(prefill_busiest, L);
  EXPECT_LE(prefill_busiest, 24 * L);
}

INSTANTIATE_TEST_SUITE_P(Archs, SyntheticModel, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         test::CaseIndexName());

}  // namespace
}  // namespace k3::cuda
