#include "tools/model_args.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "model/known_configs.h"
#include "quant/families/family.h"
#include "tools/flag_checks.h"
#include "tools/launched_ranks.h"
#include "tools/node_ranks.h"
#include "runtime/parallel_executor.h"

#ifdef K3_HAVE_CUDA
#include "backend/cuda/executor/cuda_model.h"
#endif

namespace k3::cli {

void add_model_args(CLI::App* cmd, ModelArgs& args, PromptInput input) {
  cmd->add_option("--model", args.model, "checkpoint directory (any family)")->required();
  if (input != PromptInput::kNone) {
    auto* ids = cmd->add_option("--ids", args.ids, "prompt token ids, comma-separated (e.g. 1,2,3)");
    if (input == PromptInput::kIds) {
      ids->required();
    } else {
      auto* prompt = cmd->add_option("--prompt", args.prompt, "prompt text (special-token names are plain text)");
      ids->excludes(prompt);
      prompt->excludes(ids);
      cmd->callback([ids, prompt] {
        if (ids->count() == 0 && prompt->count() == 0) throw CLI::RequiredError("--ids or --prompt");
      });
    }
  }
  cmd->add_option("--threads", args.threads, "CPU threads (default: all cores)")
      ->check(integer_in(0, max_engine_threads(),
                         "at most " + std::to_string(kMaxThreadsPerHardwareThread) + " × the hardware threads"));
  cmd->add_option("--tensor-parallel", args.tensor_parallel,
                  "CPU: divide the heads, channels and vocabulary among N in-process ranks (values exchanged "
                  "by all-gather); results are bit-identical to 1")
      ->check(integer_in(1, kMaxParallelRanks));
  cmd->add_option("--expert-parallel", args.expert_parallel,
                  "CPU: divide the routed experts among N in-process ranks (each binds its share; tokens reach "
                  "them by all-to-all); with --tensor-parallel T, N is the number of ranks, a multiple of T; "
                  "results are bit-identical to 1")
      ->check(integer_in(1, kMaxParallelRanks));
  cmd->add_option("--expert-placement", args.expert_placement,
                  "with --expert-parallel: place the experts from a routing histogram (--record-routing), hot "
                  "experts copied to several ranks")
      ->check(CLI::ExistingFile);
  cmd->add_option("--redundant-experts", args.redundant_experts,
                  "with --expert-placement: extra expert copies per rank")
      ->check(integer_in(0, kMaxParallelRanks));
  cmd->add_option("--record-routing", args.record_routing,
                  "CPU: count every routed pick per MoE layer and expert; written to this file as JSON at exit");
  cmd->add_option("--rank-timeout", args.rank_timeout,
                  "under mpirun or --nnodes: seconds a rank waits for the others in a collective before the job fails")
      ->check(CLI::Range(0.1, 86400.0));
  add_node_rank_options(cmd, args);
  cmd->add_option("--activations", args.activations,
                  "activation numerics: weight-only (float activations, default), checkpoint (the "
                  "checkpoint's contract: NVFP4 W4A4 with its input_scale, FP8 e4m3 activations; on CUDA the "
                  "routed NVFP4 experts' W4A4, the FP8 GEMMs always quantise) or bf16 (CPU only: every "
                  "linear's input rounded to bf16, as the CUDA backend computes)")
      ->check(CLI::IsMember({"weight-only", "checkpoint", "bf16"}));
  cmd->add_option("--device", args.device, "cpu (default), cuda or cuda:N")->check(parsed_by([](const std::string& t) { parse_device(t); }));
  args.gpu_memory_option =
      cmd->add_option("--gpu-memory", args.gpu_memory, "CUDA memory arena: bytes, 80G, 512M or a share of free memory (90%)")
          ->check(parsed_by(check_gpu_memory))
          ->capture_default_str();
  args.max_sequences_option = cmd->add_option("--max-sequences", args.max_sequences, "CUDA: sequences alive at once (state slots)")
                                  ->check(integer_in(1, kMaxSequencesFlag))
                                  ->capture_default_str();
  cmd->add_option("--max-context", args.max_context,
                  "tokens per sequence, prompt plus --max-tokens (a longer request is refused before any work); "
                  "default: the config's max_position_embeddings (else 4096) on the CPU, 4096 on CUDA (a multiple of 64 there)")
      ->check(integer_in(1, kMaxContextFlag));
  cmd->add_option("--expert-cache", args.expert_cache,
                  "CUDA expert streaming: routed experts stay in pinned host memory behind an LRU device cache "
                  "of this size (e.g. 8G; decode CUDA graphs off)")
      ->check(parsed_by([](const std::string& t) { parse_expert_cache(t); }));
  cmd->add_option("--experts-on-cpu", args.experts_on_cpu,
                  "CUDA hybrid experts: this many routed experts of each MoE layer are computed by the CPU (the "
                  "coldest in --expert-placement's recorded routing, else the last ones), the GPU holds the rest "
                  "(decode CUDA graphs off)")
      ->check(integer_in(1, 1 << 20));
  args.dense_linears_option =
      cmd->add_option("--dense-linears", args.dense_linears,
                      "CUDA dense linears (attention projections, dense and shared MLPs, lm_head): auto (each "
                      "scheme's measured choice), packed (every packed form: the least memory) or bf16 (dequantised)")
          ->check(CLI::IsMember(dense_linears_flag_values()))
          ->capture_default_str();
}

namespace {

// A size flag's text: "<n>" bytes or "<n>K|M|G|T" (binary units, fractions allowed: "1.5G"), or
// "<n>%" (a share). nullopt when it is none of these or not finite.
struct SizeText {
  double value = 0;  // bytes, or percent when `percent`
  bool percent = false;
};
std::optional<SizeText> read_size(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (text.empty() || ec != std::errc() || ptr == begin || !std::isfinite(value)) return std::nullopt;
  const std::string_view suffix(ptr, static_cast<size_t>(end - ptr));
  if (suffix == "%") return SizeText{value, true};
  double unit = 1;
  if (suffix == "K" || suffix == "k") {
    unit = 1024.0;
  } else if (suffix == "M" || suffix == "m") {
    unit = 1024.0 * 1024.0;
  } else if (suffix == "G" || suffix == "g") {
    unit = 1024.0 * 1024.0 * 1024.0;
  } else if (suffix == "T" || suffix == "t") {
    unit = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  return SizeText{value * unit, false};
}

}  // namespace

K3Config resolve_synthetic_config(const std::string& what) {
  const Where where{"", "", "--synthetic"};
  if (const std::optional<std::string> text = known_config_json(what)) {
    return parse_k3_config(parse_json(*text, what + " (built in)"));
  }
  std::error_code ec;
  if (!std::filesystem::exists(what, ec)) {
    std::string names;
    for (const std::string& n : known_config_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(where, "'" + what + "' is neither a known config (" + names + ") nor a file");
  }
  try {
    return load_k3_config(what);
  } catch (const Error& e) {
    throw Error(where, e.what());
  }
}

void keep_first_layers(K3Config& config, int64_t layers) {
  if (layers == 0) return;
  if (layers < 1 || layers > config.num_layers) {
    throw Error(Where{"", "", "--layers"},
                "must be in [1, " + std::to_string(config.num_layers) + "], got " + std::to_string(layers));
  }
  config.num_layers = layers;
  config.mixer.resize(static_cast<size_t>(layers));
  config.ffn.resize(static_cast<size_t>(layers));
}

std::vector<int64_t> parse_batch_sizes(const std::string& text, int64_t max) {
  std::vector<int64_t> sizes;
  for (const std::string& item : split_commas(text)) {
    const std::optional<int64_t> v = parse_integer(item);
    if (!v || *v < 1 || *v > max) {
      throw Error(Where{"", "", "--batch"}, "'" + item + "' is not a batch size (an integer in [1, " + std::to_string(max) + "])");
    }
    sizes.push_back(*v);
  }
  return sizes;
}

uint64_t parse_expert_cache(const std::string& text) { return parse_byte_size(text, "--expert-cache"); }

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  const Where where{"", "", flag};
  const std::optional<SizeText> size = read_size(text);
  if (!size || size->percent) throw Error(where, "'" + text + "' is not a size (e.g. 8G, 512M, or bytes)");
  if (!(size->value >= 1) || size->value > 1e18) {
    throw Error(where, "'" + text + "' must be at least one byte and at most 1e18");
  }
  return static_cast<uint64_t>(size->value);
}

void check_gpu_memory(const std::string& text) {
  const std::optional<SizeText> size = read_size(text);
  if (!size || size->value < 0 || size->value > (size->percent ? 100 : 1e18)) {
    throw Error(Where{"", "", "--gpu-memory"}, "'" + text + "' is not a size (e.g. 80G, 512M, 90%)");
  }
}

int64_t context_limit(const ModelArgs& args, const K3Config& config, bool cuda) {
  if (args.max_context) return *args.max_context;
  if (cuda) return kDefaultCudaContext;
  return config.max_position_embeddings.value_or(kDefaultCudaContext);
}

void check_prompt_fits(const Engine& engine, size_t prompt_tokens, int64_t max_tokens) {
  check_context(engine.max_context(), static_cast<int64_t>(prompt_tokens), max_tokens, "--max-context");
}

PrefillProgress terminal_prefill_progress() {
  if (!isatty(STDERR_FILENO)) return {};
  return [shown = false](int64_t done, int64_t total) mutable {
    if (done < total) {
      std::fprintf(stderr, "\rprefill %lld/%lld tokens", static_cast<long long>(done), static_cast<long long>(total));
      shown = true;
    } else if (shown) {
      std::fprintf(stderr, "\r\033[K");  // a one-step prefill printed nothing to clear
    }
    std::fflush(stderr);
  };
}

int parse_device(const std::string& text) {
  if (text == "cpu") return -1;
  if (text == "cuda") return 0;
  if (text.starts_with("cuda:")) {
    int index = -1;
    const char* begin = text.data() + 5;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && ptr == end && begin != end && index >= 0) return index;
  }
  throw Error(Where{"", "", "--device"}, "'" + text + "' is not a device (cpu, cuda or cuda:N)");
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, end - start));
    if (end == text.size()) return items;
    start = end + 1;
  }
}

std::optional<int64_t> parse_integer(const std::string& item) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
  if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) return std::nullopt;
  return v;
}

std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab) {
  const Where where{"", "", "--ids"};
  std::vector<int64_t> ids;
  for (const std::string& item : split_commas(text)) {
    const std::optional<int64_t> v = parse_integer(item);
    if (!v) throw Error(where, "'" + item + "' is not an integer token id");
    if (*v < 0 || *v >= vocab) {
      throw Error(where, "token id " + item + " is out of range [0, " + std::to_string(vocab) + ")");
    }
    ids.push_back(*v);
  }
  return ids;
}

Tokenizer load_tokenizer(const std::string& dir, int64_t vocab) {
  Tokenizer tok = Tokenizer::load(dir);
  if (tok.n_vocab() > vocab) {
    throw Error(Where{dir + "/tokenizer_config.json", "", ""},
                "the tokenizer has " + std::to_string(tok.n_vocab()) + " ids but the model's vocab_size is " + std::to_string(vocab));
  }
  return tok;
}

namespace {

// --expert-placement's histogram, loaded once (it lives until the process ends).
const RoutingHistogram& placement_histogram(const std::string& path, int64_t experts) {
  static const RoutingHistogram histogram = RoutingHistogram::load(path, experts);
  return histogram;
}

}  // namespace

#ifdef K3_HAVE_CUDA
namespace {

cuda::CudaOptions cuda_options(const ModelArgs& args, const K3Config& config, const EngineOptions& options, int device,
                               uint64_t expert_cache) {
  cuda::CudaOptions cuda;
  cuda.w4a4 = options.linear.activation == cpu::ActivationNumerics::CheckpointContract;
  cuda.device = device;
  cuda.memory = args.gpu_memory;
  cuda.max_sequences = args.max_sequences;
  cuda.max_context = options.max_context;
  cuda.expert_cache_bytes = expert_cache;
  cuda.experts_on_cpu = args.experts_on_cpu;
  cuda.dense_linears = cuda::dense_linears_named(args.dense_linears, "--dense-linears");
  if (args.experts_on_cpu > 0 && !args.expert_placement.empty()) {
    cuda.cpu_expert_histogram = &placement_histogram(args.expert_placement, config.moe ? config.moe->num_experts : 0);
  }
  if (args.serving) cuda.snapshot_slots = kServeSnapshotSlots;
  return cuda;
}

}  // namespace
#endif

namespace {

// --record-routing's histogram, written when the process ends (the engines that fill it are gone).
class RoutingRecordFile {
 public:
  RoutingHistogram histogram;
  std::string path;
  ~RoutingRecordFile() {
    if (path.empty()) return;
    try {
      histogram.save(path);
    } catch (const Error& e) {
      std::fprintf(stderr, "k3: error: %s\n", e.what());
    }
  }
};

}  // namespace

void set_expert_routing_options(const ModelArgs& args, const K3Config& config, bool cuda, EngineOptions& options) {
  const int64_t experts = config.moe ? config.moe->num_experts : 0;
  if (args.experts_on_cpu > 0 && !cuda) {
    throw Error(Where{"", "", "--experts-on-cpu"}, "divides the experts between the CPU and a GPU: it needs --device cuda");
  }
  if (!args.expert_placement.empty()) {
    if (args.expert_parallel < 2 && args.experts_on_cpu == 0) {
      throw Error(Where{"", "", "--expert-placement"},
                  "places the experts among ranks or between CPU and GPU: it needs --expert-parallel N > 1 or --experts-on-cpu N");
    }
    if (!config.moe) throw Error(Where{args.expert_placement, "", ""}, "the model has no routed experts to place");
  }
  if (!args.expert_placement.empty() && args.expert_parallel > 1 && !cuda) {
    const RoutingHistogram& histogram = placement_histogram(args.expert_placement, experts);
    options.expert_histogram = &histogram;
    options.redundant_experts = args.redundant_experts;
    // What the placement buys on the recorded traffic: the busiest rank's picks over the mean.
    const ExpertPlacement contiguous(experts, args.expert_parallel),
        placed(histogram, args.expert_parallel, args.redundant_experts);
    double before = 1, after = 1;
    for (const auto& [layer, counts] : histogram.layers) {
      before = std::max(before, contiguous.imbalance(histogram, layer));
      after = std::max(after, placed.imbalance(histogram, layer));
    }
    std::fprintf(stderr, "expert placement: %d ranks, %d redundant per rank; busiest rank over the mean (worst layer): %.3f contiguous, %.3f placed\n",
                 args.expert_parallel, args.redundant_experts, before, after);
  }
  if (!args.record_routing.empty()) {
    if (cuda) throw Error(Where{"", "", "--record-routing"}, "counts the CPU backend's routing: it needs the CPU backend");
    if (!config.moe) throw Error(Where{"", "", "--record-routing"}, "the model has no routed experts");
    static RoutingRecordFile record;
    record.histogram.experts = experts;
    record.path = args.record_routing;
    options.routing_record = &record.histogram;
  }
}

EngineOptions engine_options(const ModelArgs& args, const K3Config& config) {
  EngineOptions options;
  options.threads = args.threads;
  options.linear.activation = args.activations == "checkpoint" ? cpu::ActivationNumerics::CheckpointContract
                              : args.activations == "bf16"     ? cpu::ActivationNumerics::Bf16Inputs
                                                               : cpu::ActivationNumerics::WeightOnly;
  const int device = parse_device(args.device);
  start_node_ranks(args);  // with --nnodes: this node's rank processes run the command; not here
  const uint64_t expert_cache = args.expert_cache.empty() ? 0 : parse_expert_cache(args.expert_cache);
  if (expert_cache > 0 && device < 0) {
    throw Error(Where{"", "", "--expert-cache"}, "streams experts to a GPU: it needs --device cuda");
  }
  if (args.gpu_memory_option && args.gpu_memory_option->count() > 0 && device < 0) {
    throw Error(Where{"", "", "--gpu-memory"}, "sizes the CUDA memory arena: it needs --device cuda");
  }
  if (args.dense_linears_option && args.dense_linears_option->count() > 0 && device < 0) {
    throw Error(Where{"", "", "--dense-linears"}, "chooses the CUDA dense linears' form: it needs --device cuda");
  }
  if (args.serving) {
    options.max_sequences = args.max_sequences;
  } else if (args.max_sequences_option && args.max_sequences_option->count() > 0 && device < 0) {
    throw Error(Where{"", "", "--max-sequences"}, "sizes the CUDA state slots: it needs --device cuda");
  }
  options.max_context = context_limit(args, config, device >= 0);
  check_parallel_layout({args.tensor_parallel, args.expert_parallel}, "--tensor-parallel", "--expert-parallel");
  options.tensor_parallel = args.tensor_parallel;
  options.expert_parallel = args.expert_parallel;
  set_expert_routing_options(args, config, device >= 0, options);
  if (device >= 0 && args.expert_parallel > 1 && !args.expert_placement.empty() && args.experts_on_cpu == 0) {
    throw Error(Where{"", "", "--expert-placement"}, "places experts among CPU ranks: the CUDA backend's expert-parallel ranks take the contiguous split");
  }
  DeviceRankExecutor device_ranks;  // under mpirun: each rank's CUDA executor
  if (device >= 0) {
#ifdef K3_HAVE_CUDA
    if (options.linear.activation == cpu::ActivationNumerics::Bf16Inputs) {
      throw Error(Where{"", "", "--activations"}, "'" + args.activations + "' applies to the CPU backend only");
    }
    const cuda::CudaOptions cuda = cuda_options(args, config, options, device, expert_cache);
    options.prefill_chunk = cuda.max_step_tokens;
    // --tensor-parallel T / --expert-parallel E: max(T, E) in-process ranks, rank r on cuda:(device +
    // r) (docs/cuda-backend.md "Expert parallelism", "Attention tensor parallelism"); the engine sees
    // one executor.
    const ParallelLayout layout{args.tensor_parallel, args.expert_parallel};
    options.tensor_parallel = 1;
    options.expert_parallel = 1;
    options.expert_histogram = nullptr;
    options.executor = [cuda, layout](const K3Config& config, const LoadPlan& plan, PlanFiles& files) -> std::unique_ptr<Executor> {
      if (layout.world() == 1) return cuda::make_cuda_executor(cuda, config, plan, files);
      return make_layout_executors(layout, [cuda, &config, &plan, &files](const ParallelRanks& ranks, Communicator& rank) {
        cuda::CudaOptions o = cuda;
        o.device = cuda.device + rank.rank();
        return cuda::make_cuda_executor(o, config, plan, files, ranks);
      });
    };
    // Under mpirun: one rank per process, on cuda:(device + its rank on the node).
    device_ranks = [cuda](const K3Config& config, const LoadPlan& plan, PlanFiles& files, const ParallelRanks& ranks) {
      cuda::CudaOptions o = cuda;
      o.device = cuda.device + launched_local_rank();
      return cuda::make_cuda_executor(o, config, plan, files, ParallelRanks{.tensor = ranks.tensor, .experts = ranks.experts});
    };
#else
    throw Error(Where{"", "", "--device"}, "this k3 was built without the CUDA backend (configure with -DK3_CUDA=ON)");
#endif
  }
  join_launched_ranks(args, options, device_ranks);
  return options;
}

std::unique_ptr<Engine> make_synthetic_engine(const K3Config& config, const EngineOptions& options, const ModelArgs& args,
                                              uint64_t seed) {
#ifdef K3_HAVE_CUDA
  const cuda::CudaOptions cuda = cuda_options(args, config, options, parse_device(args.device), 0);
  return std::make_unique<Engine>(config, cuda::make_synthetic_cuda_executor(cuda, config, seed), options);
#else
  (void)config, (void)options, (void)args, (void)seed;
  throw Error(Where{"", "", "--synthetic"}, "this k3 was built without the CUDA backend (configure with -DK3_CUDA=ON)");
#endif
}

LoadedModel load_model(const ModelArgs& args, int64_t max_tokens) {
  const CheckpointDir ckpt = open_checkpoint_dir(args.model);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  LoadedModel m;
  if (args.prompt) {
    m.tokenizer = load_tokenizer(args.model, ckpt.config->vocab_size);
    const std::vector<uint32_t> ids = m.tokenizer->encode(*args.prompt, Specials::kNone);
    m.ids.assign(ids.begin(), ids.end());
  } else {
    m.ids = parse_token_ids(args.ids, ckpt.config->vocab_size);
  }
  const EngineOptions options = engine_options(args, *ckpt.config);
  check_context(options.max_context, static_cast<int64_t>(m.ids.size()), max_tokens, "--max-context");
  m.engine = std::make_unique<Engine>(args.model, options);
  return m;
}

void add_generation_args(CLI::App* cmd, GenerationArgs& args) {
  cmd->add_option("--max-tokens", args.max_tokens, "tokens to generate (prompt + max-tokens must fit --max-context)")
      ->check(integer_in(0, kMaxTokensFlag))
      ->capture_default_str();
  auto* greedy = cmd->add_flag("--greedy", args.greedy, "argmax decoding (the default)");
  auto* temp = cmd->add_option("--temperature", args.temperature, "sample at this temperature (> 0)")
                   ->check(real_in(0, true, kMaxTemperature));
  temp->excludes(greedy);
  cmd->add_option("--top-p", args.top_p, "nucleus mass in (0, 1]")->needs(temp)->check(real_in(0, true, 1));
  cmd->add_option("--top-k", args.top_k, "keep the K most likely tokens (0 = all)")
      ->needs(temp)
      ->check(integer_in(0, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--seed", args.seed, "sampling seed")->needs(temp)->check(unsigned_integer());
  cmd->add_flag("--ignore-eos", args.ignore_eos, "keep generating after an end-of-sequence token");
  args.temperature_option = temp;
}

GenerateOptions generation_options(const GenerationArgs& args) {
  GenerateOptions g;
  g.max_tokens = args.max_tokens;
  g.stop_at_eos = !args.ignore_eos;
  g.sampling.greedy = args.temperature_option->count() == 0;
  g.sampling.temperature = args.temperature;
  g.sampling.top_p = args.top_p;
  g.sampling.top_k = args.top_k;
  g.sampling.seed = args.seed;
  validate(g.sampling);
  return g;
}

}  // namespace k3::cli
