// Options shared by the commands that run a model (k3 logits, k3 generate, k3 chat): --model, the
// prompt (--ids, or --prompt text through the checkpoint's tokenizer), --threads, the generation
// and sampling flags, and the token-id list parser.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace k3::cli {

// Which prompt options a command takes.
enum class PromptInput { kIds, kIdsOrText, kNone };

// --master-addr and --master-port without the flags (tools/node_ranks.h).
inline constexpr const char* kDefaultMasterAddr = "127.0.0.1";
inline constexpr int kDefaultMasterPort = 29500;

struct ModelArgs {
  std::string model;
  std::string ids;
  std::optional<std::string> prompt;  // --prompt TEXT
  int threads = 0;                    // 0 = all cores
  int tensor_parallel = 1;            // in-process tensor-parallel ranks (CPU)
  int expert_parallel = 1;            // in-process expert-parallel ranks (CPU)
  double rank_timeout = 60;           // --rank-timeout: seconds a launched rank waits in a collective
  int nnodes = 0;                     // --nnodes: start CUDA ranks without mpirun (0: not used; tools/node_ranks.h)
  int node_rank = 0;                  // --node-rank
  std::string master_addr = kDefaultMasterAddr;  // --master-addr: rank 0's host
  int master_port = kDefaultMasterPort;          // --master-port
  std::string expert_placement;       // --expert-placement FILE: a routing histogram to place experts from
  int redundant_experts = 1;          // --redundant-experts: extra expert copies per rank with a placement
  std::string record_routing;         // --record-routing FILE: count every routed pick, written at exit
  std::string activations = "weight-only";  // --activations weight-only|checkpoint|bf16 (CPU numerics)
  std::string device = "cpu";         // --device cpu | cuda | cuda:N
  std::string gpu_memory = "90%";     // --gpu-memory: the CUDA arena
  int64_t max_sequences = 8;          // --max-sequences: CUDA state slots
  // --max-context: tokens per sequence (prompt + generated); unset: kDefaultCudaContext on CUDA, the
  // config's max_position_embeddings on the CPU (kDefaultCudaContext when the config has none).
  std::optional<int64_t> max_context;
  std::string expert_cache;           // --expert-cache SIZE: CUDA expert streaming (empty: off)
  int64_t experts_on_cpu = 0;         // --experts-on-cpu N: CUDA hybrid experts (0: off)
  std::string dense_linears = "auto";  // --dense-linears auto|packed|bf16: CUDA dense linears' form
  CLI::Option* dense_linears_option = nullptr;
  CLI::Option* gpu_memory_option = nullptr;
  CLI::Option* max_sequences_option = nullptr;
  // k3 serve: --max-sequences sizes the CPU engine's state slots too (else it is CUDA-only), and
  // the CUDA executor keeps kServeSnapshotSlots KDA snapshots for the prefix cache.
  bool serving = false;
};

// --dense-linears' values, in every build: the names cuda::dense_linears_named parses
// (backend/cuda/executor/dense_linears.h), which the CUDA build maps them through.
inline const std::vector<std::string>& dense_linears_flag_values() {
  static const std::vector<std::string> values{"auto", "packed", "bf16"};
  return values;
}

inline constexpr int64_t kDefaultCudaContext = 4096;
inline constexpr int64_t kServeSnapshotSlots = 64;
inline constexpr int64_t kMaxContextFlag = int64_t{1} << 30;  // --max-context's upper bound
inline constexpr int64_t kMaxSequencesFlag = 4096;            // --max-sequences' upper bound (CUDA slots)
inline constexpr int64_t kMaxTokensFlag = int64_t{1} << 30;   // --max-tokens' upper bound
inline constexpr double kMaxTemperature = 100;

// --gpu-memory's syntax: "<n>" bytes, "<n>K|M|G" or "<p>%" (p ≤ 100). Throws k3::Error (field '--gpu-memory').
void check_gpu_memory(const std::string& text);

// --expert-placement, --redundant-experts and --record-routing into `options` (the histograms live
// until the process ends; the recorded one is written then). Throws k3::Error naming the flag.
void set_expert_routing_options(const ModelArgs& args, const K3Config& config, bool cuda, EngineOptions& options);

// The context limit for this run: --max-context, else the default described at ModelArgs::max_context.
int64_t context_limit(const ModelArgs& args, const K3Config& config, bool cuda);

// --synthetic's value: a built-in config by name (model/known_configs.h), else a config.json path.
// Throws k3::Error (field '--synthetic') naming the known configs when it is neither.
K3Config resolve_synthetic_config(const std::string& what);
// --layers N (synthetic weights): keeps the config's first N layers; 0 keeps all. Throws k3::Error
// (field '--layers') for N outside [0, num_layers].
void keep_first_layers(K3Config& config, int64_t layers);

// "1,8,64" → {1, 8, 64}: decimal integers in [1, max]. Throws k3::Error (field '--batch').
std::vector<int64_t> parse_batch_sizes(const std::string& text, int64_t max);

// A byte-size flag: "<n>" or "<n>K|M|G|T" (binary units, fractions allowed: "1.5T"), at least one
// byte. Throws k3::Error (field `flag`) on anything else.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);
// --expert-cache SIZE → bytes: "<n>" or "<n>K|M|G" (binary units, fractions allowed: "1.5G"), > 0.
// Throws k3::Error (field '--expert-cache') on anything else.
uint64_t parse_expert_cache(const std::string& text);

// --device: -1 for the CPU, else the CUDA device index. Throws k3::Error (field '--device').
int parse_device(const std::string& text);

// kIdsOrText: exactly one of --ids / --prompt, else a usage error.
void add_model_args(CLI::App* cmd, ModelArgs& args, PromptInput input = PromptInput::kIds);

// "1,2,3" → {1, 2, 3}; every entry must be a decimal integer in [0, vocab). Throws k3::Error
// (field '--ids') naming the offending entry.
// "a,b,c" → {"a", "b", "c"}; an empty text or item stays as "" for the caller to refuse.
std::vector<std::string> split_commas(const std::string& text);
// The value of a decimal integer that is the whole of `item`, else nothing.
std::optional<int64_t> parse_integer(const std::string& item);
std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab);

// The checkpoint's tokenizer (DIR/tiktoken.model + DIR/tokenizer_config.json); throws k3::Error when
// it can emit an id ≥ the model's vocab_size.
Tokenizer load_tokenizer(const std::string& dir, int64_t vocab);

// The engine's options from the flags and the model's config, every flag checked (CUDA-only flags
// refused with --device cpu).
EngineOptions engine_options(const ModelArgs& args, const K3Config& config);

// An engine over synthetic weights generated on the GPU of args.device (k3 serve --synthetic), with
// the CUDA options engine_options() gives a checkpoint.
std::unique_ptr<Engine> make_synthetic_engine(const K3Config& config, const EngineOptions& options, const ModelArgs& args,
                                              uint64_t seed);

// Reads only the model's config to validate the prompt (its ids, and its length plus `max_tokens`
// against the context limit), then binds the weights. With --prompt the text is encoded with
// special-token names treated as text, and the tokenizer is kept.
struct LoadedModel {
  std::unique_ptr<Engine> engine;
  std::vector<int64_t> ids;
  std::optional<Tokenizer> tokenizer;
};
LoadedModel load_model(const ModelArgs& args, int64_t max_tokens = 0);

// Throws k3::Error (field '--max-context') naming the lengths when prompt + max_tokens exceed the
// engine's context limit. Call before any work.
void check_prompt_fits(const Engine& engine, size_t prompt_tokens, int64_t max_tokens);

// On a terminal (stderr a TTY): "prefill DONE/TOTAL tokens" updated in place on stderr, cleared at
// the end; elsewhere no output (an empty callback).
PrefillProgress terminal_prefill_progress();

// --max-tokens, --greedy | --temperature [--top-p --top-k --seed], --ignore-eos.
struct GenerationArgs {
  int64_t max_tokens = 16;
  bool greedy = false, ignore_eos = false;
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  CLI::Option* temperature_option = nullptr;
};
void add_generation_args(CLI::App* cmd, GenerationArgs& args);
// Validated options (greedy unless --temperature was given).
GenerateOptions generation_options(const GenerationArgs& args);

}  // namespace k3::cli
