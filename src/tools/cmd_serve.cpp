// `k3 serve --model DIR [--host 127.0.0.1] [--port 8000] [--device cpu|cuda[:N]] [--served-model-name NAME]
//          [--api-key KEY] [--max-sequences N] [--max-context N] [--max-batch-tokens N] [--gpu-memory SIZE|%]
//          [--threads N] [--prefix-cache on|off] [--prefix-cache-size SIZE] [--max-queue N]
//          [--request-timeout S] [--drain-timeout S] [--log-format text|json] [--http-header-timeout S]
//          [--response-store N] [--response-store-size SIZE]`
// The OpenAI-compatible server (server/server.h). It binds first (/health answers 503 while the
// weights load), prints one line with the URL when ready, and on SIGTERM or SIGINT drains: stops
// accepting, lets in-flight requests finish for up to --drain-timeout seconds, cuts the rest and
// exits 0. The API key may also come from K3_API_KEY. --http-header-timeout (seconds a client has to
// send a whole request header, default 10) is left out of the user docs: it exists for tests.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/error.h"
#include "server/server.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "tokenizer/synthetic_tokenizer.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {

inline constexpr int64_t kServeDefaultSequences = 256;
inline constexpr int64_t kServeMaxBatchTokensFlag = int64_t{1} << 20;

struct ServeArgs {
  ModelArgs model;
  std::string synthetic;  // --synthetic NAME|CONFIG.json: weights generated on the GPU
  uint64_t seed = 1;
  int64_t layers = 0;  // --synthetic: keep the first N layers
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;
  int64_t max_batch_tokens = 2048;
  std::string prefix_cache = "on";
  std::string prefix_cache_size;  // "" = no limit beyond the cache blocks
  int64_t max_queue = 1024;
  double request_timeout = 0, drain_timeout = 30;
  double http_header_timeout = server::HttpLimits{}.header_timeout_s;
  std::string log_format = "text";
  int64_t response_store = static_cast<int64_t>(server::ServerOptions{}.response_store_max);
  std::string response_store_size = "256M";
};

// Blocks SIGINT and SIGTERM in this thread and every thread it starts, so sigwait takes them.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

Registered add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->model.max_sequences = kServeDefaultSequences;
  a->model.serving = true;
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_args(cmd, a->model, PromptInput::kNone);
  CLI::Option* model = cmd->get_option("--model");
  model->required(false);
  CLI::Option* synthetic = cmd->add_option(
      "--synthetic", a->synthetic,
      "serve synthetic weights generated on the GPU for a built-in config name or a config.json (as k3 bench; "
      "token-id prompts, ids shown as ' <id>' text), instead of --model");
  synthetic->excludes(model);
  model->excludes(synthetic);
  cmd->add_option("--seed", a->seed, "--synthetic: seed of the weights")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--layers", a->layers, "--synthetic: keep only the first N layers of the config (0: all)")
      ->check(integer_in(0, 4096));
  cmd->callback([model, synthetic] {
    if (model->count() == 0 && synthetic->count() == 0) throw CLI::RequiredError("--model or --synthetic");
  });
  cmd->add_option("--host", a->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", a->port, "port to bind (0: any free port)")->check(integer_in(0, 65535))->capture_default_str();
  cmd->add_option("--served-model-name", a->served_model_name, "the model name of the API (default: the directory's name)");
  cmd->add_option("--api-key", a->api_key, "require 'Authorization: Bearer KEY' on the API routes (or set K3_API_KEY)");
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens, "tokens per step: decode tokens plus prompt pieces")
      ->check(integer_in(64, kServeMaxBatchTokensFlag))
      ->capture_default_str();
  cmd->add_option("--prefix-cache", a->prefix_cache, "reuse cached prompt blocks: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--prefix-cache-size", a->prefix_cache_size, "most memory the prefix cache keeps (e.g. 2G; default: any free cache blocks)")
      ->check(parsed_by([](const std::string& t) { parse_byte_size(t, "--prefix-cache-size"); }));
  cmd->add_option("--max-queue", a->max_queue, "waiting requests; beyond, requests get 503")
      ->check(integer_in(0, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--request-timeout", a->request_timeout, "seconds a request may take, 0 = no limit (408 beyond)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", a->drain_timeout, "seconds SIGTERM waits for in-flight requests")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--http-header-timeout", a->http_header_timeout, "seconds a client has to send a whole request header")
      ->check(CLI::Range(0.01, 1e7))
      ->capture_default_str();
  cmd->add_option("--response-store", a->response_store, "/v1/responses kept for previous_response_id (0: none)")
      ->check(integer_in(0, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--response-store-size", a->response_store_size, "most memory the kept responses take (e.g. 1G)")
      ->check(parsed_by([](const std::string& t) { parse_byte_size(t, "--response-store-size"); }))
      ->capture_default_str();
  cmd->add_option("--log-format", a->log_format, "request log lines on stderr: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  return {cmd, [a] {
            const sigset_t stop_signals = block_stop_signals();
            std::optional<K3Config> config;
            if (a->synthetic.empty()) {
              const CheckpointDir ckpt = open_checkpoint_dir(a->model.model);
              if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
              config = *ckpt.config;
            } else {
              config = resolve_synthetic_config(a->synthetic);
              keep_first_layers(*config, a->layers);
              if (parse_device(a->model.device) < 0) {
                throw Error(Where{"", "", "--synthetic"}, "generates its weights on a GPU: it needs --device cuda");
              }
            }
            const EngineOptions engine_opts = engine_options(a->model, *config);
            server::ServerOptions o;
            o.host = a->host;
            o.port = a->port;
            o.served_model_name = a->served_model_name;
            if (o.served_model_name.empty() && !a->synthetic.empty()) {
              o.served_model_name = std::filesystem::path(a->synthetic).stem().string();
            } else if (o.served_model_name.empty()) {
              o.served_model_name = std::filesystem::path(a->model.model).lexically_normal().filename().string();
              if (o.served_model_name.empty()) o.served_model_name = std::filesystem::path(a->model.model).parent_path().filename().string();
            }
            o.api_key = a->api_key;
            if (o.api_key.empty()) {
              if (const char* key = std::getenv("K3_API_KEY")) o.api_key = key;
            }
            o.request_timeout_s = a->request_timeout;
            o.drain_timeout_s = a->drain_timeout;
            o.json_logs = a->log_format == "json";
            o.http.header_timeout_s = a->http_header_timeout;
            o.scheduler.max_batch_tokens = a->max_batch_tokens;
            o.scheduler.max_queue = a->max_queue;
            o.scheduler.prefix_cache = a->prefix_cache == "on";
            if (!a->prefix_cache_size.empty()) o.prefix_cache_bytes = parse_byte_size(a->prefix_cache_size, "--prefix-cache-size");
            o.response_store_max = static_cast<size_t>(a->response_store);
            o.response_store_bytes = parse_byte_size(a->response_store_size, "--response-store-size");
            // The model outlives the server, which holds references to it.
            std::unique_ptr<Engine> model;
            std::optional<Tokenizer> tokenizer_holder;
            server::Server server(o);
            server.start();
            if (a->synthetic.empty()) {
              model = std::make_unique<Engine>(a->model.model, engine_opts);
              tokenizer_holder.emplace(load_tokenizer(a->model.model, model->config().vocab_size));
            } else {
              model = make_synthetic_engine(*config, engine_opts, a->model, a->seed);
              tokenizer_holder.emplace(synthetic_tokenizer(config->vocab_size));
            }
            Engine& engine = *model;
            const Tokenizer& tokenizer = *tokenizer_holder;
            server.serve(engine, tokenizer);
            std::printf("k3 serve: %s ready at http://%s:%d/v1 (%lld sequences, context %lld, %lld cache blocks)\n",
                        o.served_model_name.c_str(), o.host.c_str(), server.port(),
                        static_cast<long long>(engine.caches().state_slots), static_cast<long long>(engine.max_context()),
                        static_cast<long long>(engine.caches().kv_blocks));
            std::fflush(stdout);
            int signal = 0;
            sigwait(&stop_signals, &signal);
            std::fprintf(stderr, "k3 serve: %s: draining (up to %g s)\n", signal == SIGTERM ? "SIGTERM" : "SIGINT", o.drain_timeout_s);
            server.drain();
            return 0;
          }};
}

}  // namespace k3::cli
