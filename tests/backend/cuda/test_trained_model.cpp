// The trained tiny Kimi-K3 (models/tiny-k3, real head geometry: the fast KDA and MLA kernels) on the
// GPU against the CPU engine. A trained model does not amplify rounding the way random weights do,
// so the bounds are tight:
//  - bf16: the GPU's logits within 2e-2 of the CPU's float logits (max |diff| over max |logit|) at
//    every position the model was trained to predict: the reply, from the prompt's last token on.
//    The prompt's other positions are not trained (the loss is on replies only), and there the model
//    is ill-conditioned: on the CPU alone, rounding every linear's input to bf16 moves one logit of a
//    recall prompt by 0.31 of the largest (measured; 4e-3 elsewhere, 3.6e-3 on replies). They are
//    reported, not bounded;
//  - every family, quantized from the model by the quantize writers: the GPU's greedy token agrees
//    with the CPU's on ≥ 99 % of the positions of the CPU's greedy replies to the eval prompts
//    (teacher-forced along those replies), and the GPU's eval accuracy is within one point of the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backend/cuda/executor/cuda_model.h"
#include "cuda_test_util.h"
#include "eval/eval.h"
#include "model/engine_test_util.h"
#include "quant/families/family_writer.h"
#include "quant/families/float_source.h"

namespace k3::cuda {
namespace {

const std::string kModel = std::string(K3_SOURCE_DIR) + "/models/tiny-k3";
constexpr double kBf16LogitBound = 2e-2;
constexpr double kGreedyAgreementBound = 0.99;
constexpr double kAccuracyBound = 0.01;  // one point
// 200 examples in all: one example is half a point. At 100 per task a family took 190–310 s on the
// H200 machine (most of it the CPU's eval), too long for ten families in one device call.
constexpr int64_t kExamplesPerTask = 50;

EngineOptions gpu_options() {
  CudaOptions o;
  o.memory = "8G";
  o.max_sequences = 64;
  o.max_context = 1024;
  EngineOptions e;
  e.max_context = 1024;
  e.executor = [o](const K3Config& c, const LoadPlan& p, PlanFiles& f) { return make_cuda_executor(o, c, p, f); };
  return e;
}

EngineOptions cpu_options() {
  EngineOptions e;
  e.max_context = 1024;
  return e;
}

bool have_model() { return std::filesystem::exists(kModel + "/config.json"); }

// The checkpoint of `family` written from the trained model (the bf16 family is the model itself).
std::string family_checkpoint(FamilyId family) {
  if (family == FamilyId::Bf16) return kModel;
  const std::string dir = ::testing::TempDir() + "/k3_trained_" + family_name(family);
  std::filesystem::remove_all(dir);
  const CheckpointSource source(kModel);
  write_family(family, source, source.checkpoint().config_json->value(), dir);
  for (const char* name : {"tiktoken.model", "tokenizer_config.json"}) {
    std::filesystem::copy_file(kModel + "/" + name, dir + "/" + name);
  }
  return dir;
}

TEST(TrainedModelOnGpu, Bf16LogitsWithinTheBoundOfTheCpuFloatLogits) {
  K3_REQUIRE_GPU();
  ASSERT_TRUE(have_model()) << kModel;
  Engine cpu(kModel, cpu_options());
  Engine gpu(kModel, gpu_options());
  const Tokenizer tokenizer = Tokenizer::load(kModel);
  const eval::ChatFormat format = eval::chat_format_of(cpu.config());
  eval::EvalOptions options;
  options.n = 4;
  double worst_reply = 0, worst_any = 0;
  for (const eval::Example& e : eval::make_eval_examples(options)) {
    std::vector<int64_t> ids = eval::prompt_ids(tokenizer, format, e.prompt);
    const size_t prompt_tokens = ids.size();
    for (uint32_t id : tokenizer.encode(eval::trained_reply(format, e.answer), Specials::kAll)) ids.push_back(id);
    const std::vector<float> on_gpu = k3::test::prefill_logits(gpu, ids), on_cpu = k3::test::prefill_logits(cpu, ids);
    const size_t vocab = on_cpu.size() / ids.size(), first = (prompt_tokens - 1) * vocab;
    worst_any = std::max(worst_any, k3::test::relative_max_error(on_gpu, on_cpu));
    worst_reply = std::max(worst_reply, k3::test::relative_max_error(std::vector<float>(on_gpu.begin() + first, on_gpu.end()),
                                                                     std::vector<float>(on_cpu.begin() + first, on_cpu.end())));
  }
  std::printf("[ trained kimi-k3 bf16 ] GPU vs CPU float logits, max |diff| / max |logit|: %.2e on the replies (bound %.0e), "
              "%.2e over every position\n",
              worst_reply, kBf16LogitBound, worst_any);
  EXPECT_LT(worst_reply, kBf16LogitBound);
}

class TrainedFamilyOnGpu : public ::testing::TestWithParam<FamilyId> {};

TEST_P(TrainedFamilyOnGpu, GreedyRepliesAndAccuracyMatchTheCpu) {
  K3_REQUIRE_GPU();
  ASSERT_TRUE(have_model()) << kModel;
  const FamilyId family = GetParam();
  const std::string dir = family_checkpoint(family);
  Engine cpu(dir, cpu_options());
  Engine gpu(dir, gpu_options());
  const Tokenizer tokenizer = Tokenizer::load(dir);
  eval::EvalOptions options;
  options.n = kExamplesPerTask;
  const auto examples = eval::make_eval_examples(options);
  const eval::EvalResult on_cpu = eval::run_eval(cpu, tokenizer, examples, options);
  const eval::EvalResult on_gpu = eval::run_eval(gpu, tokenizer, examples, options);
  const eval::KlSummary along = eval::kl_against_base(cpu, on_cpu, gpu, options);
  const double cpu_acc = on_cpu.scores.back().accuracy(), gpu_acc = on_gpu.scores.back().accuracy();
  std::printf("[ trained kimi-k3 %s ] greedy agreement %.4f over %lld positions, KL(cpu||gpu) mean %.2e p99 %.2e; "
              "accuracy cpu %.3f gpu %.3f\n",
              family_name(family), along.top1_agreement, static_cast<long long>(along.positions), along.mean, along.p99,
              cpu_acc, gpu_acc);
  EXPECT_GE(along.top1_agreement, kGreedyAgreementBound) << family_name(family);
  EXPECT_LE(std::fabs(gpu_acc - cpu_acc), kAccuracyBound + 1e-12) << family_name(family);
}

INSTANTIATE_TEST_SUITE_P(EveryFamily, TrainedFamilyOnGpu, ::testing::ValuesIn(all_families()),
                         [](const auto& info) {
                           std::string name = family_name(info.param);
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace k3::cuda
