// Hybrid CPU/GPU experts (docs/cuda-backend.md "Hybrid CPU/GPU experts"): greedy decode of a
// checkpoint with N routed experts of every MoE layer on the CPU, against the all-GPU run with and
// without decode CUDA graphs (the hybrid path runs without them), in interleaved rounds.
//
// For each batch size B and round, every configuration runs the same job: B sequences prefilled with
// a 32-token prompt each, then --steps greedy decode steps (argmax on the device) timed on the host.
// Reported per configuration and B (medians over rounds): ms per step, decode tokens/s, the host's
// time per step computing the CPU experts and waiting for their inputs, and whether the greedy tokens
// equal the all-GPU run's. The overlap is how much of the CPU experts' time the step hides:
// 1 − (step − all-GPU eager step) / CPU time, clamped to [0, 1] (the GPU's own expert work shrinks
// as experts move to the CPU, so this slightly overstates it).
//
// Run: k3_bench_cuda_hybrid MODEL_DIR [--cpu 8,16,24] [--batch 1,8,32] [--steps 32] [--rounds 5]
//      [--histogram FILE] [--gpu-memory 16G]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/executor/cuda_model.h"
#include "core/error.h"
#include "parallel/expert_placement.h"
#include "quant/families/family.h"
#include "runtime/engine.h"

namespace k3::cuda {
namespace {

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> out;
  for (const char* p = text; *p != 0;) {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    if (end == p) throw Error(std::string("not a list of integers: ") + text);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Config {
  std::string name;
  int64_t on_cpu = 0;
  bool graphs = true;
  std::unique_ptr<Engine> engine;
};

struct Run {
  double step_ms = 0, cpu_ms = 0, wait_ms = 0;
  std::vector<int64_t> tokens;
};

// B sequences: a 32-token prompt each (one prefill step), then `steps` timed greedy decode steps.
Run run(Engine& e, int64_t batch, int64_t steps) {
  const int64_t vocab = e.config().vocab_size;
  std::vector<int64_t> seqs;
  std::vector<SequenceInput> in;
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(e.new_sequence());
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < 32; ++i) prompt.push_back((b * 7919 + i * 104729 + 17) % (vocab - 256));
    SequenceInput s;
    s.sequence = seqs.back();
    s.tokens = prompt;
    s.argmax_only = true;
    in.push_back(std::move(s));
  }
  std::vector<StepResult> out = e.step(in);
  const CudaExecutorStats before = cuda_executor_stats(e.executor());
  Run r;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    for (int64_t b = 0; b < batch; ++b) {
      in[static_cast<size_t>(b)].tokens = {out[static_cast<size_t>(b)].picked};
      r.tokens.push_back(out[static_cast<size_t>(b)].picked);
    }
    out = e.step(in);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CudaExecutorStats after = cuda_executor_stats(e.executor());
  r.step_ms = seconds * 1e3 / static_cast<double>(steps);
  r.cpu_ms = (after.cpu_expert_seconds - before.cpu_expert_seconds) * 1e3 / static_cast<double>(steps);
  r.wait_ms = (after.cpu_wait_seconds - before.cpu_wait_seconds) * 1e3 / static_cast<double>(steps);
  for (int64_t s : seqs) e.free_sequence(s);
  return r;
}

int main_impl(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: k3_bench_cuda_hybrid MODEL_DIR [--cpu 8,16,24] [--batch 1,8,32] [--steps 32] "
                         "[--rounds 5] [--histogram FILE] [--gpu-memory 16G]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<int64_t> on_cpu = {8, 16, 24}, batches = {1, 8, 32};
  int64_t steps = 32, rounds = 5;
  std::string histogram_path, memory = "16G";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cpu") on_cpu = parse_list(argv[i + 1]);
    else if (flag == "--batch") batches = parse_list(argv[i + 1]);
    else if (flag == "--steps") steps = std::atoll(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoll(argv[i + 1]);
    else if (flag == "--histogram") histogram_path = argv[i + 1];
    else if (flag == "--gpu-memory") memory = argv[i + 1];
    else throw Error("unknown flag " + flag);
  }
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  std::unique_ptr<RoutingHistogram> histogram;
  std::vector<Config> configs;
  configs.push_back({"all-GPU, graphs", 0, true, nullptr});
  configs.push_back({"all-GPU, eager", 0, false, nullptr});
  for (int64_t n : on_cpu) configs.push_back({std::to_string(n) + " experts/layer on CPU", n, false, nullptr});
  for (Config& c : configs) {
    CudaOptions o;
    o.memory = memory;
    o.max_sequences = max_batch;
    o.max_context = 64 + ((steps + 63) / 64) * 64;
    o.graphs = c.graphs;
    o.experts_on_cpu = c.on_cpu;
    if (!histogram_path.empty() && !histogram) {
      const int64_t experts = open_checkpoint_dir(dir).config->moe->num_experts;
      histogram = std::make_unique<RoutingHistogram>(RoutingHistogram::load(histogram_path, experts));
    }
    o.cpu_expert_histogram = histogram.get();
    EngineOptions e;
    e.max_context = o.max_context;
    e.executor = [o](const K3Config& k, const LoadPlan& p, PlanFiles& f) { return make_cuda_executor(o, k, p, f); };
    c.engine = std::make_unique<Engine>(dir, e);
  }
  const MoeConfig& moe = *configs.front().engine->config().moe;
  std::printf("%s: %lld routed experts per MoE layer, top-%lld; %lld decode steps per round, %lld rounds (medians)\n",
              dir.c_str(), static_cast<long long>(moe.num_experts), static_cast<long long>(moe.experts_per_token),
              static_cast<long long>(steps), static_cast<long long>(rounds));
  std::printf("%-28s %5s %10s %10s %10s %10s %8s %6s\n", "configuration", "B", "ms/step", "tok/s", "CPU ms", "wait ms",
              "overlap", "same");
  for (int64_t batch : batches) {
    std::vector<std::vector<Run>> runs(configs.size());
    for (Config& c : configs) run(*c.engine, batch, 2);  // warm-up (graph capture, lazy loads)
    for (int64_t round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < configs.size(); ++i) runs[i].push_back(run(*configs[i].engine, batch, steps));
    }
    double eager_ms = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
      std::vector<double> step, cpu, wait;
      for (const Run& r : runs[i]) step.push_back(r.step_ms), cpu.push_back(r.cpu_ms), wait.push_back(r.wait_ms);
      const double ms = median(step), cpu_ms = median(cpu);
      if (i == 1) eager_ms = ms;
      const bool same = runs[i].front().tokens == runs[0].front().tokens;
      char overlap[16] = "-";
      if (cpu_ms > 0) std::snprintf(overlap, sizeof overlap, "%.2f", std::clamp(1.0 - (ms - eager_ms) / cpu_ms, 0.0, 1.0));
      std::printf("%-28s %5lld %10.3f %10.1f %10.3f %10.3f %8s %6s\n", configs[i].name.c_str(), static_cast<long long>(batch), ms,
                  static_cast<double>(batch) * 1e3 / ms, cpu_ms, median(wait), overlap, same ? "yes" : "NO");
    }
  }
  return 0;
}

}  // namespace
}  // namespace k3::cuda

int main(int argc, char** argv) {
  try {
    return k3::cuda::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_cuda_hybrid: %s\n", e.what());
    return 1;
  }
}
