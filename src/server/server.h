// `k3 serve`: the OpenAI-compatible HTTP server over a Scheduler (runtime/scheduler.h).
//
// Routes: POST /v1/completions, POST /v1/chat/completions, POST /v1/responses (stored responses
// kept in memory, bounded: response_store.h), GET /v1/models, POST /tokenize,
// POST /detokenize (all behind the API key when one is set), GET /health (503 while loading or
// draining, else 200), GET /metrics (Prometheus text). A known route with another method is 405
// (with Allow), anything else 404; errors are OpenAI error objects (server/api_error.h).
//
// Lifecycle: start() binds and answers /health 503 at once; serve() takes the loaded model and
// runs the scheduler loop on its own thread; drain() stops accepting, lets in-flight requests
// finish for up to the drain timeout, then cuts the rest and stops.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "grammar/grammar.h"
#include "runtime/scheduler.h"
#include "server/api/response_store.h"
#include "server/http/http_server.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;              // "" = no authentication
  double request_timeout_s = 0;     // 0 = none
  double drain_timeout_s = 30;
  bool json_logs = false;           // one JSON object per request line on stderr, else text
  int io_threads = 2;
  int max_n = 16;
  HttpLimits http;
  SchedulerOptions scheduler;
  uint64_t prefix_cache_bytes = 0;  // the prefix cache's limit (pages and snapshots); 0 = free blocks
  size_t response_store_max = 1024;              // /v1/responses kept for previous_response_id (0: none)
  uint64_t response_store_bytes = uint64_t{256} << 20;  // and the most bytes they take
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds and listens (throws k3::Error naming host:port); /health answers 503 until serve().
  void start();
  int port() const;
  // Serves `engine` (its max_context is the API's context limit) with `tokenizer`; both outlive the
  // server.
  void serve(Engine& engine, const Tokenizer& tokenizer);
  // SIGTERM / SIGINT: stop accepting, wait up to drain_timeout_s for in-flight requests, cut the
  // rest, close every connection and stop the loop.
  void drain();

 private:
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);
  void route(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void completion(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange, const std::string& path);
  void observe_step(const StepReport& report);
  void set_gauges(const SchedulerStats& stats);
  void log(const struct JobSummary& job) const;
  // The compiled form of a reply grammar over the model's vocabulary (built on first use).
  grammar::CompiledGrammarPtr compiled(const grammar::Grammar& reply);

  ServerOptions options_;
  ServerMetrics metrics_;
  std::unique_ptr<HttpServer> http_;
  std::atomic<bool> ready_{false}, draining_{false};
  Engine* engine_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
  std::unique_ptr<ResponseStore> responses_;
  std::mutex grammar_mutex_;
  grammar::VocabularyPtr grammar_vocab_;  // guarded by grammar_mutex_ until built
  grammar::GrammarCache grammars_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread loop_;
  int64_t created_ = 0;
  SchedulerStats last_stats_;  // loop thread: for the counters' increments
};

}  // namespace k3::server
