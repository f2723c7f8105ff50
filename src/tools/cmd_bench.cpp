// `k3 bench --synthetic NAME|CONFIG.json [--batch 1,8,64] [--context N] [--steps N] [--device cuda:N]
// [--gpu-memory 90%] [--no-graphs] [--seed N] [--json FILE]`: the CUDA executor at a model's real
// shapes over weights generated on the GPU (no checkpoint). For each batch size B: B sequences are
// prefilled with `context` synthetic tokens, then `steps` greedy decode steps (one token per sequence,
// picked on the device) are timed after two untimed ones (the eager step and the graph capture).
// Reported per B: decode tokens/s, ms per step and the fraction of the memory-bandwidth floor
// reached: the bytes one decode step must move (decode_traffic) over the device's read ceiling
// (parallel/machine.h), with the expected distinct experts per MoE layer and with those the profiled
// steps' picks named. Also the prefill rate of one min(context, max_step_tokens)-token chunk at the
// largest batch.
// --expert-cache SIZE runs with expert streaming (docs/cuda-backend.md "Expert streaming": routed experts in
// pinned host memory behind an LRU device cache of SIZE, CUDA graphs off) and adds per batch size the
// cache's hit rate and the host→device GB/s of the timed steps; --layers N keeps the first N layers
// of the config (so that the experts' pinned host copy fits the machine).
// --experts-on-cpu N computes N routed experts of every MoE layer on the host's CPU (hybrid CPU/GPU
// experts over host copies of the generated bf16 banks, CUDA graphs off); the same run first measures
// the all-GPU eager step, and reports per batch size the CPU's time per step and how much of it the
// step hides (overlap = 1 − (hybrid step − eager all-GPU step) / CPU time).
// --routing zipf:S skews the synthetic router's picks to Zipf's law over each MoE layer's experts
// (model/routing_skew.h); the floor then counts the distinct experts such a batch reads.
// Per batch size, and for the prefill chunk, a few more steps run profiled (eager, a CUDA event
// between op classes: backend/cuda/executor/op_classes.h) and give each op class's time per step.
// --family F loads the model as a checkpoint of family F at the config's shapes instead (bench_family.h:
// written under --scratch with --template-experts distinct experts per bank, planned and uploaded as
// a release is; its routers route as --routing says); the floor then counts each weight's stored
// bytes in that family.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>

#include <omp.h>

#include "core/error.h"
#include "io/json.h"
#include "io/output_file.h"
#include "model/config.h"
#include "model/known_configs.h"
#include "model/parameters.h"
#include "model/routing_skew.h"
#include "parallel/machine.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "quant/families/quantize_options.h"
#include "tools/bench_family.h"
#include "tools/model_args.h"
#ifdef K3_HAVE_CUDA
#include "backend/cuda/core/device.h"
#include "backend/cuda/executor/cuda_model.h"
#endif

namespace k3::cli {
namespace {

constexpr int64_t kMaxBatch = 4096;       // the executor's slot limit
constexpr int64_t kWarmupSteps = 2;       // eager step, then graph capture
constexpr int64_t kProfiledSteps = 4;     // decode steps per batch size profiled per op class, after the timed ones
constexpr int64_t kMaxBenchContext = int64_t{1} << 24;
constexpr int64_t kMaxBenchSteps = int64_t{1} << 20;
constexpr int64_t kMaxBenchExperts = int64_t{1} << 20;  // flag range; the config's expert count bounds it next

struct BenchArgs {
  std::string synthetic;
  std::string batch = "1,8,64";
  int64_t context = 1024, steps = 32;
  std::string device = "cuda:0";
  std::string gpu_memory = "90%";
  bool no_graphs = false;
  uint64_t seed = 0;
  std::string json;
  std::string expert_cache;  // expert streaming (empty: every expert resident)
  int64_t layers = 0;        // 0: all of the config's
  int64_t experts_on_cpu = 0;  // hybrid CPU/GPU experts (0: all on the GPU)
  std::string routing = "uniform";  // the synthetic router's skew (model/routing_skew.h)
  std::string mla_decode = "auto";  // the MLA decode kernel: auto, mma or wgmma
  std::string family;               // empty: bf16 weights generated on the GPU
  int64_t template_experts = 8;     // --family: distinct experts written per bank
  std::string scratch;              // --family: where the checkpoint is written (empty: the temp folder)
  std::string recipe = "default";   // --family gguf: the GGML type recipe (gguf_recipe.h)
  std::string dense_linears = "auto";  // --family: the dense linears' form (cuda::DenseLinears)
};

[[noreturn]] void bad_flag(const char* flag, const std::string& why) { throw Error(Where{"", "", flag}, why); }

// Per-op-class stream time over `steps` profiled steps (backend/cuda/executor/op_classes.h).
struct OpBreakdown {
  std::vector<std::string> names;  // the op classes
  std::vector<double> seconds;     // per class
  int64_t steps = 0;
  int64_t touched_experts = 0, moe_layer_calls = 0;  // the distinct experts the steps' MoE layer calls picked, summed
  int64_t busiest_expert_rows = 0;                    // the most rows one expert got in each call, summed
  double per_layer(int64_t sum) const {
    return moe_layer_calls > 0 ? static_cast<double>(sum) / static_cast<double>(moe_layer_calls) : 0.0;
  }
  double touched_per_layer() const { return per_layer(touched_experts); }
  double busiest_rows_per_layer() const { return per_layer(busiest_expert_rows); }
  double step_ms() const {
    double total = 0;
    for (double s : seconds) total += s;
    return steps > 0 ? total * 1e3 / static_cast<double>(steps) : 0.0;
  }
  double class_ms(size_t c) const { return steps > 0 ? seconds[c] * 1e3 / static_cast<double>(steps) : 0.0; }
};

// What one decode step must move through memory, in bytes: every weight except the routed experts
// (bf16 matrices, f32 vectors; the embedding only as the rows looked up unless it is the lm_head),
// the `experts_hit` distinct experts per MoE layer the batch reads (expected_experts_hit, or those the
// profiled steps' picks named), each KDA layer's f32 recurrent state read and written once per
// sequence, and each MLA layer's cached latent rows [c | k_pe] (bf16) read once per sequence.
struct DecodeTraffic {
  double weights = 0, experts = 0, kda_state = 0, mla_cache = 0;
  double total() const { return weights + experts + kda_state + mla_cache; }
};

// The expected distinct experts per MoE layer a batch of B tokens picks when each picks expert e with
// probability `shares[e]`: E·(1 − (1 − k/E)^B) for uniform routing.
double expected_experts_hit(const K3Config& c, int64_t batch, std::span<const double> shares) {
  return c.moe ? distinct_experts_per_step(shares, batch) : 0.0;
}

// The bytes a parameter's weights weigh: their stored bytes in the benchmarked family, or (generated
// weights) bf16 matrices and f32 vectors.
using ParamBytes = std::function<double(const ParamSpec&)>;
double generated_bytes(const ParamSpec& p) {
  const bool f32 = p.kind == ParamKind::Vector || p.kind == ParamKind::Conv;
  return static_cast<double>(p.numel()) * (f32 ? 4 : 2);
}

DecodeTraffic decode_traffic(const K3Config& c, int64_t batch, double context, double experts_hit, const ParamBytes& weighs) {
  DecodeTraffic t;
  std::vector<double> bank_bytes(static_cast<size_t>(c.num_layers), 0.0);
  for (const ParamSpec& p : parameter_inventory(c)) {
    const double bytes = weighs(p);
    if (p.kind == ParamKind::ExpertBank) {
      bank_bytes[static_cast<size_t>(p.layer)] += bytes;
    } else if (p.kind == ParamKind::Embedding) {
      t.weights += c.tie_word_embeddings ? bytes : bytes * static_cast<double>(batch) / static_cast<double>(c.vocab_size);
    } else {
      t.weights += bytes;
    }
  }
  if (c.moe) {
    const double E = static_cast<double>(c.moe->num_experts);
    for (double bank : bank_bytes) t.experts += bank / E * experts_hit;
  }
  const double B = static_cast<double>(batch), D = static_cast<double>(c.kda.head_dim);
  t.kda_state = static_cast<double>(c.count(MixerKind::kKda)) * B * 2 * 4 * static_cast<double>(c.kda.num_heads) * D * D;
  const double row = static_cast<double>(c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) * 2;
  t.mla_cache = static_cast<double>(c.count(MixerKind::kMla)) * B * row * context;
  return t;
}

struct DecodeResult {
  int64_t batch = 0;
  double seconds = 0;  // the timed steps together
  // The floor's bytes with the expected distinct experts per MoE layer (`experts_expected`), and
  // with those the profiled steps' picks named.
  double experts_expected = 0;
  DecodeTraffic traffic, touched_traffic;
  int64_t graph_replays = 0;
  // Expert streaming, over the timed steps.
  int64_t hits = 0, misses = 0;
  uint64_t bytes_copied = 0;
  double copy_seconds = 0;
  // Hybrid CPU/GPU experts, over the timed steps: the host's time computing the CPU's picks and
  // waiting for their inputs, the picks on each side, and the all-GPU eager run's time for the same steps.
  double cpu_seconds = 0, wait_seconds = 0, all_gpu_eager_seconds = 0;
  int64_t cpu_picks = 0, gpu_picks = 0;
  OpBreakdown ops;
};

struct PrefillResult {
  int64_t batch = 0, tokens = 0;
  double seconds = 0;
  OpBreakdown ops;  // one more chunk of `tokens`, profiled
};

struct Measured {
  std::string weights;      // what the weights are, for the report's first line
  std::string device_name;  // the CUDA device's
  const DeviceKind* kind = nullptr;  // the kind whose HBM read ceiling the floor uses (parallel/machine.h)
  uint64_t weight_bytes = 0;
  bool graphs = true;
  bool streaming = false;
  int64_t cache_slots = 0;
  uint64_t cache_bytes = 0, host_expert_bytes = 0;
  int64_t cpu_experts_per_layer = 0, routed_experts = 0;
  std::vector<DecodeResult> decode;  // traffic left for the caller
  PrefillResult prefill;
};

// Milliseconds per timed step of a total over the timed steps.
double per_step_ms(const BenchArgs& a, double seconds) { return seconds * 1e3 / static_cast<double>(a.steps); }

// The share of the CPU's time per step that the hybrid step hides against the all-GPU eager step.
double overlap(const BenchArgs& a, const DecodeResult& r) {
  const double cpu_ms = per_step_ms(a, r.cpu_seconds);
  const double hidden = cpu_ms - (per_step_ms(a, r.seconds) - per_step_ms(a, r.all_gpu_eager_seconds));
  return cpu_ms > 0 ? std::clamp(hidden / cpu_ms, 0.0, 1.0) : 0.0;
}

// The op classes' time per profiled step, one column per batch size and one for the prefill chunk:
// µs and share of the profiled step; classes no step spent time in are left out.
void print_breakdown(const Measured& m) {
  std::vector<const OpBreakdown*> cols;
  std::vector<std::string> heads;
  for (const DecodeResult& r : m.decode) cols.push_back(&r.ops), heads.push_back("b=" + std::to_string(r.batch));
  cols.push_back(&m.prefill.ops), heads.push_back("prefill " + std::to_string(m.prefill.tokens));
  std::printf("per op class (%lld profiled decode steps per batch, one profiled prefill chunk; eager, a CUDA event between "
              "classes): us per step and share\n%-15s",
              static_cast<long long>(kProfiledSteps), "op class");
  for (const std::string& h : heads) std::printf(" %18s", h.c_str());
  std::printf("\n");
  const std::vector<std::string>& names = cols.front()->names;
  for (size_t c = 0; c < names.size(); ++c) {
    bool any = false;
    for (const OpBreakdown* o : cols) any = any || (o->steps > 0 && o->seconds[c] > 0);
    if (!any) continue;
    std::printf("%-15s", names[c].c_str());
    for (const OpBreakdown* o : cols) {
      const double step = o->step_ms();
      std::printf(" %10.1f %6.1f%%", o->class_ms(c) * 1e3, step > 0 ? 100.0 * o->class_ms(c) / step : 0.0);
    }
    std::printf("\n");
  }
  std::printf("%-15s", "profiled step");
  for (const OpBreakdown* o : cols) std::printf(" %10.1f %7s", o->step_ms() * 1e3, "");
  std::printf("\n");
}

Json breakdown_json(const OpBreakdown& o) {
  Json classes = Json::object();
  for (size_t c = 0; c < o.seconds.size(); ++c) classes[o.names[c]] = o.class_ms(c);
  return {{"profiled_steps", o.steps}, {"profiled_step_ms", o.step_ms()}, {"ms_per_step", classes}};
}

void print_report(const BenchArgs& a, const Measured& m) {
  std::printf("k3 bench: %s, %s, %.2f GB on %s (%s; floor at the %s read ceiling); context %lld, %lld "
              "decode steps, CUDA graphs %s, routing %s\n",
              a.synthetic.c_str(), m.weights.c_str(), static_cast<double>(m.weight_bytes) / 1e9, a.device.c_str(), m.device_name.c_str(), m.kind->name,
              static_cast<long long>(a.context), static_cast<long long>(a.steps), m.graphs ? "on" : "off",
              parse_routing_skew(a.routing).text().c_str());
  std::printf("%6s %11s %9s %9s %9s %9s %10s %10s %9s  (floor: the step's bytes at %.2f TB/s, with the expected "
              "experts; touched: with the experts the profiled steps picked)\n",
              "batch", "tok/s", "ms/step", "GB/step", "floor ms", "of floor", "experts", "touched", "of floor",
              m.kind->hbm_read_bps / 1e12);
  for (const DecodeResult& r : m.decode) {
    const double ms = r.seconds * 1e3 / static_cast<double>(a.steps);
    const double floor_ms = r.traffic.total() / m.kind->hbm_read_bps * 1e3;
    const double touched_ms = r.touched_traffic.total() / m.kind->hbm_read_bps * 1e3;
    std::printf("%6lld %11.1f %9.3f %9.3f %9.3f %8.1f%% %10.1f %10.1f %8.1f%%", static_cast<long long>(r.batch),
                static_cast<double>(r.batch * a.steps) / r.seconds, ms, r.traffic.total() / 1e9, floor_ms,
                100.0 * floor_ms / ms, r.experts_expected, r.ops.touched_per_layer(), 100.0 * touched_ms / ms);
    if (m.graphs && r.graph_replays < a.steps) {
      std::printf("  (%lld of %lld timed steps replayed a graph)", static_cast<long long>(r.graph_replays),
                  static_cast<long long>(a.steps));
    }
    std::printf("\n");
  }
  if (!m.decode.empty() && m.decode.front().ops.moe_layer_calls > 0) {
    std::printf("rows of the busiest expert per MoE layer (profiled steps):");
    for (const DecodeResult& r : m.decode) {
      std::printf(" b=%lld %.1f", static_cast<long long>(r.batch), r.ops.busiest_rows_per_layer());
    }
    std::printf("\n");
  }
  if (m.streaming) {
    std::printf("expert streaming: cache %lld experts (%.2f GB on the device), %.2f GB of experts in pinned host memory\n",
                static_cast<long long>(m.cache_slots), static_cast<double>(m.cache_bytes) / 1e9,
                static_cast<double>(m.host_expert_bytes) / 1e9);
    std::printf("%6s %9s %9s %11s %11s %9s\n", "batch", "hit rate", "misses", "GB copied", "copy GB/s", "GB/s/step");
    for (const DecodeResult& r : m.decode) {
      const double lookups = static_cast<double>(r.hits + r.misses);
      std::printf("%6lld %8.1f%% %9lld %11.3f %11.2f %9.2f\n", static_cast<long long>(r.batch),
                  lookups > 0 ? 100.0 * static_cast<double>(r.hits) / lookups : 0.0, static_cast<long long>(r.misses),
                  static_cast<double>(r.bytes_copied) / 1e9,
                  r.copy_seconds > 0 ? static_cast<double>(r.bytes_copied) / r.copy_seconds / 1e9 : 0.0,
                  static_cast<double>(r.bytes_copied) / r.seconds / 1e9);
    }
  }
  if (m.cpu_experts_per_layer > 0) {
    std::printf("hybrid experts: %lld of %lld routed experts of every MoE layer on the CPU (%d OpenMP threads); the "
                "all-GPU eager step measured first in this run\n",
                static_cast<long long>(m.cpu_experts_per_layer), static_cast<long long>(m.routed_experts), omp_get_max_threads());
    std::printf("%6s %12s %9s %9s %9s %9s\n", "batch", "all-GPU ms", "CPU ms", "wait ms", "overlap", "CPU picks");
    for (const DecodeResult& r : m.decode) {
      const int64_t picks = r.cpu_picks + r.gpu_picks;
      std::printf("%6lld %12.3f %9.3f %9.3f %9.2f %8.1f%%\n", static_cast<long long>(r.batch),
                  per_step_ms(a, r.all_gpu_eager_seconds), per_step_ms(a, r.cpu_seconds), per_step_ms(a, r.wait_seconds),
                  overlap(a, r), picks > 0 ? 100.0 * static_cast<double>(r.cpu_picks) / static_cast<double>(picks) : 0.0);
    }
  }
  std::printf("prefill: one %lld-token step (batch %lld, its last sequence) in %.3f ms = %.0f tok/s\n",
              static_cast<long long>(m.prefill.tokens), static_cast<long long>(m.prefill.batch),
              m.prefill.seconds * 1e3, static_cast<double>(m.prefill.tokens) / m.prefill.seconds);
  print_breakdown(m);
}

Json report_json(const BenchArgs& a, const Measured& m) {
  Json rows = Json::array();
  for (const DecodeResult& r : m.decode) {
    const double floor_s = r.traffic.total() / m.kind->hbm_read_bps, step_s = r.seconds / static_cast<double>(a.steps);
    rows.push_back({{"batch", r.batch},
                    {"tokens_per_s", static_cast<double>(r.batch * a.steps) / r.seconds},
                    {"ms_per_step", step_s * 1e3},
                    {"step_bytes", r.traffic.total()},
                    {"weight_bytes", r.traffic.weights},
                    {"expert_bytes", r.traffic.experts},
                    {"kda_state_bytes", r.traffic.kda_state},
                    {"mla_cache_bytes", r.traffic.mla_cache},
                    {"floor_ms", floor_s * 1e3},
                    {"fraction_of_floor", floor_s / step_s},
                    {"experts_expected_per_layer", r.experts_expected},
                    {"experts_touched_per_layer", r.ops.touched_per_layer()},
                    {"busiest_expert_rows_per_layer", r.ops.busiest_rows_per_layer()},
                    {"touched_floor_ms", r.touched_traffic.total() / m.kind->hbm_read_bps * 1e3},
                    {"fraction_of_touched_floor", r.touched_traffic.total() / m.kind->hbm_read_bps / step_s},
                    {"graph_replays", r.graph_replays},
                    {"cache_hits", r.hits},
                    {"cache_misses", r.misses},
                    {"bytes_copied", r.bytes_copied},
                    {"copy_seconds", r.copy_seconds},
                    {"cpu_expert_ms", per_step_ms(a, r.cpu_seconds)},
                    {"cpu_wait_ms", per_step_ms(a, r.wait_seconds)},
                    {"all_gpu_eager_ms", per_step_ms(a, r.all_gpu_eager_seconds)},
                    {"overlap", overlap(a, r)},
                    {"cpu_picks", r.cpu_picks},
                    {"gpu_picks", r.gpu_picks},
                    {"op_breakdown", breakdown_json(r.ops)}});
  }
  return {{"config", a.synthetic},
          {"weights", m.weights},
          {"family", a.family.empty() ? "generated bf16" : a.family},
          {"template_experts", a.family.empty() ? 0 : a.template_experts},
          {"gguf_recipe", a.family == "gguf" ? a.recipe : ""},
          {"dense_linears", a.dense_linears},
          {"device", a.device},
          {"seed", a.seed},
          {"weight_bytes", m.weight_bytes},
          {"context", a.context},
          {"steps", a.steps},
          {"graphs", m.graphs},
          {"expert_cache_slots", m.cache_slots},
          {"expert_cache_bytes", m.cache_bytes},
          {"host_expert_bytes", m.host_expert_bytes},
          {"experts_on_cpu", m.cpu_experts_per_layer},
          {"routing", parse_routing_skew(a.routing).text()},
          {"device_name", m.device_name},
          {"read_ceiling_kind", m.kind->name},
          {"read_ceiling_bytes_per_s", m.kind->hbm_read_bps},
          {"decode", rows},
          {"prefill",
           {{"batch", m.prefill.batch},
            {"tokens", m.prefill.tokens},
            {"ms", m.prefill.seconds * 1e3},
            {"tokens_per_s", static_cast<double>(m.prefill.tokens) / m.prefill.seconds},
            {"op_breakdown", breakdown_json(m.prefill.ops)}}}};
}

#ifdef K3_HAVE_CUDA
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The machine kind a CUDA device's name names ("NVIDIA H100 80GB HBM3": H100); the H200's for any other.
const DeviceKind& device_kind_named(const std::string& name) {
  for (const DeviceKind& k : device_kinds()) {
    if (name.find(k.name) != std::string::npos) return k;
  }
  return device_kinds().front();
}

// The op classes' time of the steps `run` makes, profiled.
template <typename Run>
OpBreakdown profile(Executor& executor, Run run) {
  const cuda::CudaExecutorStats before = cuda::cuda_executor_stats(executor);
  cuda::set_cuda_op_profiling(executor, true);
  run();
  cuda::set_cuda_op_profiling(executor, false);
  const cuda::CudaExecutorStats after = cuda::cuda_executor_stats(executor);
  OpBreakdown o;
  o.steps = after.profiled_steps - before.profiled_steps;
  o.touched_experts = after.touched_experts - before.touched_experts;
  o.busiest_expert_rows = after.busiest_expert_rows - before.busiest_expert_rows;
  o.moe_layer_calls = after.profiled_moe_layer_calls - before.profiled_moe_layer_calls;
  for (size_t c = 0; c < after.op_seconds.size(); ++c) {
    o.names.emplace_back(cuda::op_class_name(static_cast<cuda::OpClass>(c)));
    o.seconds.push_back(after.op_seconds[c] - before.op_seconds[c]);
  }
  return o;
}

// Prefill then timed decode at each batch size, on one executor sized for the largest, with
// `experts_on_cpu` routed experts per MoE layer on the CPU.
Measured measure_executor(const BenchArgs& a, const K3Config& config, SampleCheckpoint* sample,
                          const std::vector<int64_t>& batches, int device, int64_t experts_on_cpu) {
  cuda::CudaOptions options;
  options.device = device;
  options.memory = a.gpu_memory;
  options.max_sequences = *std::max_element(batches.begin(), batches.end());
  options.max_context = (a.context + kWarmupSteps + a.steps + kProfiledSteps + 63) / 64 * 64;
  options.graphs = !a.no_graphs;
  options.dense_linears = cuda::dense_linears_named(a.dense_linears, "--dense-linears");
  options.expert_cache_bytes = a.expert_cache.empty() ? 0 : parse_expert_cache(a.expert_cache);
  options.experts_on_cpu = experts_on_cpu;
  options.mla_decode = a.mla_decode == "mma"     ? cuda::MlaDecodeKernel::kMma
                       : a.mla_decode == "wgmma" ? cuda::MlaDecodeKernel::kWgmma
                                                 : cuda::MlaDecodeKernel::kAuto;
  // Streaming and CPU experts read the picks on the host.
  if (options.expert_cache_bytes > 0 || a.experts_on_cpu > 0) options.graphs = false;
  const std::unique_ptr<Executor> executor =
      sample != nullptr ? cuda::make_cuda_executor(options, config, sample->plan(), sample->files())
                        : cuda::make_synthetic_cuda_executor(options, config, a.seed, parse_routing_skew(a.routing));

  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int64_t> token(0, config.vocab_size - 1);
  auto tokens = [&](int64_t n) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t& id : ids) id = token(rng);
    return ids;
  };
  // Decode steps: sequence s is row s and gives the logits of row s.
  std::vector<int64_t> rows;
  std::vector<BatchSlice> slices;
  const auto tables = disjoint_block_tables(options.max_sequences, options.max_context / 64);
  for (int64_t s = 0; s < options.max_sequences; ++s) {
    rows.push_back(s);
    slices.push_back({s, s, 1, &tables[static_cast<size_t>(s)]});
  }
  // A greedy decode step as the engine runs one: the next tokens picked on the device, one id per
  // sequence back to the host (the logits stay there).
  auto decode_step = [&](int64_t batch) {
    const size_t n = static_cast<size_t>(batch);
    executor->run_argmax(tokens(batch), std::span<const BatchSlice>(slices).first(n), std::span<const int64_t>(rows).first(n));
  };

  Measured m;
  m.graphs = options.graphs;
  char what[160];
  if (sample != nullptr) {
    std::snprintf(what, sizeof what, "%s%s%s checkpoint (%lld distinct experts per bank, dense linears %s, written in %.0f s)",
                  a.family.c_str(), a.family == "gguf" ? " " : "", a.family == "gguf" ? a.recipe.c_str() : "",
                  static_cast<long long>(a.template_experts), a.dense_linears.c_str(), sample->seconds_to_write());
  } else {
    std::snprintf(what, sizeof what, "bf16 weights generated on the GPU");
  }
  m.weights = what;
  for (const int64_t batch : batches) {
    for (int64_t s = 0; s < batch; ++s) {
      executor->add_sequence(s, 0);
      for (int64_t done = 0; done < a.context;) {
        const int64_t n = std::min(a.context - done, options.max_step_tokens);
        const BatchSlice slice{s, 0, n, &tables[static_cast<size_t>(s)]};
        const int64_t last = n - 1;
        const auto t0 = std::chrono::steady_clock::now();
        executor->run(tokens(n), std::span(&slice, 1), std::span(&last, 1));
        // The largest batch's last sequence: its first chunk runs a shape the earlier ones warmed
        // (cold only when that batch is 1 and no other came before).
        if (done == 0 && s == batch - 1 && batch >= m.prefill.batch) m.prefill = {batch, n, seconds_since(t0), {}};
        done += n;
      }
    }
    for (int64_t i = 0; i < kWarmupSteps; ++i) decode_step(batch);
    const cuda::CudaExecutorStats before = cuda::cuda_executor_stats(*executor);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.steps; ++i) decode_step(batch);
    DecodeResult r;
    r.batch = batch;
    r.seconds = seconds_since(t0);
    const cuda::CudaExecutorStats after = cuda::cuda_executor_stats(*executor);
    r.graph_replays = after.graph_replays - before.graph_replays;
    r.hits = after.cache_hits - before.cache_hits;
    r.misses = after.cache_misses - before.cache_misses;
    r.bytes_copied = after.bytes_copied - before.bytes_copied;
    r.copy_seconds = after.copy_seconds - before.copy_seconds;
    r.cpu_seconds = after.cpu_expert_seconds - before.cpu_expert_seconds;
    r.wait_seconds = after.cpu_wait_seconds - before.cpu_wait_seconds;
    r.cpu_picks = after.cpu_picks - before.cpu_picks;
    r.gpu_picks = after.gpu_picks - before.gpu_picks;
    r.ops = profile(*executor, [&] {
      for (int64_t i = 0; i < kProfiledSteps; ++i) decode_step(batch);
    });
    m.decode.push_back(r);
    for (int64_t s = 0; s < batch; ++s) executor->free_sequence(s);
  }
  // The prefill chunk again, profiled, on a fresh sequence.
  {
    executor->add_sequence(0, 0);
    const BatchSlice slice{0, 0, m.prefill.tokens, &tables[0]};
    const int64_t last = m.prefill.tokens - 1;
    m.prefill.ops = profile(*executor, [&] { executor->run(tokens(m.prefill.tokens), std::span(&slice, 1), std::span(&last, 1)); });
    executor->free_sequence(0);
  }
  const cuda::CudaExecutorStats stats = cuda::cuda_executor_stats(*executor);
  m.device_name = cuda::cuda_device_name(device);
  m.kind = &device_kind_named(m.device_name);
  m.weight_bytes = stats.weight_bytes;
  m.streaming = stats.streaming;
  m.cache_slots = stats.cache_slots;
  m.cache_bytes = stats.cache_bytes;
  m.host_expert_bytes = stats.host_expert_bytes;
  m.cpu_experts_per_layer = stats.cpu_experts_per_layer;
  m.routed_experts = config.moe ? config.moe->num_experts : 0;
  return m;
}

// With CPU experts the all-GPU eager executor runs first (its own weights, freed before the hybrid
// one is made) for the overlap's baseline.
Measured measure(const BenchArgs& a, const K3Config& config, SampleCheckpoint* sample, const std::vector<int64_t>& batches,
                 int device) {
  if (a.experts_on_cpu == 0) return measure_executor(a, config, sample, batches, device, 0);
  const Measured all_gpu = measure_executor(a, config, sample, batches, device, 0);
  Measured m = measure_executor(a, config, sample, batches, device, a.experts_on_cpu);
  for (size_t i = 0; i < m.decode.size(); ++i) m.decode[i].all_gpu_eager_seconds = all_gpu.decode[i].seconds;
  return m;
}

// Before a checkpoint is written for minutes: the device exists.
void check_device_present(int device) {
  const size_t count = cuda::list_devices().size();
  if (count == 0) bad_flag("--device", "no CUDA device is available");
  if (static_cast<size_t>(device) >= count) {
    bad_flag("--device", "cuda:" + std::to_string(device) + " does not exist (" + std::to_string(count) + " device(s))");
  }
}
#else
void check_device_present(int) {
  bad_flag("--device", "this k3 was built without the CUDA backend (configure with -DK3_CUDA=ON)");
}

Measured measure(const BenchArgs&, const K3Config&, SampleCheckpoint*, const std::vector<int64_t>&, int) {
  bad_flag("--device", "this k3 was built without the CUDA backend (configure with -DK3_CUDA=ON)");
}
#endif

int run_bench(const BenchArgs& a) {
  // Every flag is checked before the device is touched.
  const std::vector<int64_t> batches = parse_batch_sizes(a.batch, kMaxBatch);
  if (a.context < 1) bad_flag("--context", "must be ≥ 1, got " + std::to_string(a.context));
  if (a.steps < 1) bad_flag("--steps", "must be ≥ 1, got " + std::to_string(a.steps));
  const int device = parse_device(a.device);
  if (device < 0) bad_flag("--device", "the benchmark runs on a CUDA device (cuda or cuda:N)");
  if (!a.expert_cache.empty()) parse_expert_cache(a.expert_cache);
  K3Config config = resolve_synthetic_config(a.synthetic);
  keep_first_layers(config, a.layers);
  if (a.experts_on_cpu > 0) {
    if (!config.moe) bad_flag("--experts-on-cpu", a.synthetic + " has no routed experts");
    if (a.experts_on_cpu >= config.moe->num_experts) {
      bad_flag("--experts-on-cpu", "must be between 1 and " + std::to_string(config.moe->num_experts - 1) +
                                       " (the GPU keeps at least one expert per layer), got " + std::to_string(a.experts_on_cpu));
    }
    if (!a.expert_cache.empty()) bad_flag("--experts-on-cpu", "and --expert-cache: choose one");
  }
  const RoutingSkew routing = parse_routing_skew(a.routing);
  check_routing_skew(config, routing, a.synthetic);
  if (!a.json.empty()) check_output_path(a.json, "--json");
  std::unique_ptr<SampleCheckpoint> sample;
  ParamBytes weighs = generated_bytes;
  std::map<std::string, double> stored;
  if (a.family.empty() && a.recipe != "default") bad_flag("--recipe", "is for --family gguf");
  if (a.family.empty() && a.dense_linears != "auto") bad_flag("--dense-linears", "is for --family (generated weights are bf16)");
  if (!a.family.empty()) {
    const FamilyId family = parse_family(a.family);
    if (family == FamilyId::GgufExpertPack) {
      bad_flag("--family", "gguf-expert-pack cannot be benchmarked from a sample (its pack is cut from written payloads): use gguf");
    }
    if (a.recipe != "default" && family != FamilyId::Gguf) bad_flag("--recipe", "is for --family gguf");
    if (config.moe && a.template_experts > config.moe->num_experts) {
      bad_flag("--template-experts", "must be at most the config's " + std::to_string(config.moe->num_experts) + " experts");
    }
    check_device_present(device);
    QuantizeOptions quantize;
    quantize.gguf_recipe = parse_gguf_recipe(a.recipe);
    quantize.producer = "k3 bench";
    quantize.concurrent_units = omp_get_max_threads();  // SeededSource reads concurrently
    sample = std::make_unique<SampleCheckpoint>(family, a.synthetic, a.layers, a.seed, a.template_experts, a.scratch, quantize, routing);
    for (const ParamFootprint& p : sample->footprint().params) stored[p.spec.name] = static_cast<double>(p.bytes);
    weighs = [&stored](const ParamSpec& p) { return stored.contains(p.name) ? stored.at(p.name) : 0.0; };
  }
  Measured m = measure(a, config, sample.get(), batches, device);
  // Cached rows read per MLA layer and sequence, averaged over the timed steps.
  const double mean_context = static_cast<double>(a.context + kWarmupSteps) + static_cast<double>(a.steps + 1) / 2;
  const std::vector<double> shares =
      config.moe ? target_pick_shares(config.moe->num_experts, config.moe->experts_per_token, routing) : std::vector<double>{};
  for (DecodeResult& r : m.decode) {
    r.experts_expected = expected_experts_hit(config, r.batch, shares);
    r.traffic = decode_traffic(config, r.batch, mean_context, r.experts_expected, weighs);
    r.touched_traffic = decode_traffic(config, r.batch, mean_context, r.ops.touched_per_layer(), weighs);
  }
  print_report(a, m);
  if (!a.json.empty()) {
    const std::string text = report_json(a, m).dump(2) + "\n";
    write_file_atomic(a.json, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), "--json");
  }
  return 0;
}

}  // namespace

Registered add_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Benchmark the CUDA executor at a model's shapes over synthetic weights");
  cmd->add_option("--synthetic", args->synthetic,
                  "a known model (kimi-linear-48b-a3b) or a config.json: its shapes, weights generated on the GPU")
      ->required();
  cmd->add_option("--batch", args->batch, "batch sizes, comma-separated")
      ->check(parsed_by([](const std::string& t) { parse_batch_sizes(t, kMaxBatch); }))
      ->capture_default_str();
  cmd->add_option("--context", args->context, "prompt tokens per sequence before the decode steps")
      ->check(integer_in(1, kMaxBenchContext))
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "timed decode steps per batch size")
      ->check(integer_in(1, kMaxBenchSteps))
      ->capture_default_str();
  cmd->add_option("--device", args->device, "cuda or cuda:N")
      ->check(parsed_by([](const std::string& t) { parse_device(t); }))
      ->capture_default_str();
  cmd->add_option("--gpu-memory", args->gpu_memory, "CUDA memory arena: bytes, 80G, 512M or a share of free memory")
      ->check(parsed_by(check_gpu_memory))
      ->capture_default_str();
  cmd->add_flag("--no-graphs", args->no_graphs, "run every decode step eagerly (no CUDA graphs)");
  cmd->add_option("--seed", args->seed, "seed of the synthetic weights and tokens")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--json", args->json, "also write the numbers to this JSON file");
  cmd->add_option("--expert-cache", args->expert_cache,
                  "expert streaming: routed experts in pinned host memory behind a device cache of this size (8G)")
      ->check(parsed_by([](const std::string& t) { parse_expert_cache(t); }));
  cmd->add_option("--layers", args->layers, "keep only the first N layers of the config (0: all)")
      ->check(integer_in(0, kMaxConfigLayers));
  cmd->add_option("--experts-on-cpu", args->experts_on_cpu,
                  "hybrid experts: N routed experts of every MoE layer computed on the CPU (graphs off); also "
                  "measures the all-GPU eager step for the overlap")
      ->check(integer_in(0, kMaxBenchExperts));
  cmd->add_option("--routing", args->routing,
                  "the synthetic router's picks: uniform, or zipf:S (expert shares ∝ rank^−S per MoE layer, S in (0, 4])")
      ->check(parsed_by([](const std::string& t) { parse_routing_skew(t); }))
      ->capture_default_str();
  cmd->add_option("--mla-decode-kernel", args->mla_decode,
                  "MLA decode attention kernel: auto (by heads), mma (heads as M) or wgmma (cache rows as M), to compare them")
      ->check(CLI::IsMember({"auto", "mma", "wgmma"}))
      ->capture_default_str();
  cmd->add_option("--family", args->family,
                  "load the model as a checkpoint of this family at the config's shapes (bf16 | modelopt-mixed | "
                  "modelopt-nvfp4 | modelopt-fp8 | compressed-tensors-mxfp4 | fp8-block | modelslim-w4a8 | gguf)")
      ->check(parsed_by([](const std::string& t) { parse_family(t); }));
  cmd->add_option("--template-experts", args->template_experts,
                  "--family: distinct routed experts written per bank (expert e reads expert e mod N)")
      ->check(integer_in(1, kMaxBenchExperts))
      ->capture_default_str();
  cmd->add_option("--recipe", args->recipe, "--family gguf: the GGML type recipe (default | q4_k_m | q2_k_experts)")
      ->check(parsed_by([](const std::string& t) { parse_gguf_recipe(t); }))
      ->capture_default_str();
  cmd->add_option("--scratch", args->scratch, "--family: the folder the checkpoint is written under (default: the temp folder)");
  cmd->add_option("--dense-linears", args->dense_linears,
                  "--family: dense linears in each scheme's measured choice (auto), in every packed form the "
                  "schemes have (packed) or dequantised to bf16 (bf16), to compare them")
      ->check(CLI::IsMember(dense_linears_flag_values()))
      ->capture_default_str();
  return {cmd, [args] { return run_bench(*args); }};
}

}  // namespace k3::cli
