#include "server/server.h"

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/api/openai_request.h"
#include "server/api/openai_response.h"
#include "server/api/response_store.h"
#include "server/api/responses_output.h"
#include "server/api/responses_request.h"
#include "server/api_error.h"
#include "server/completion_job.h"
#include "runtime/grammar_constraint.h"

namespace k3::server {
namespace {

struct Route {
  const char* path;
  const char* method;
  bool api;  // behind the API key, needs the model
};
constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", true}, {"/v1/chat/completions", "POST", true}, {"/v1/responses", "POST", true},
    {"/v1/models", "GET", true},       {"/tokenize", "POST", true},             {"/detokenize", "POST", true},
    {"/health", "GET", false},         {"/metrics", "GET", false},
};

// The path without a query string.
std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

// Constant-time comparison of the presented key with the configured one.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      responses_(std::make_unique<ResponseStore>(options_.response_store_max, options_.response_store_bytes)) {
  http_ = std::make_unique<HttpServer>(
      options_.host, options_.port, options_.http,
      [this](HttpRequest request, std::shared_ptr<HttpExchange> exchange) { handle(std::move(request), std::move(exchange)); },
      options_.io_threads);
}

Server::~Server() {
  if (scheduler_) scheduler_->stop();
  if (loop_.joinable()) loop_.join();
  http_->shutdown();
}

void Server::start() { http_->start(); }
int Server::port() const { return http_->port(); }

void Server::serve(Engine& engine, const Tokenizer& tokenizer) {
  engine_ = &engine;
  tokenizer_ = &tokenizer;
  created_ = unix_seconds_now();
  if (options_.prefix_cache_bytes > 0) {
    const CacheGeometry& g = engine.caches();
    const uint64_t per_block = std::max<uint64_t>(1, g.kv_block_bytes + g.state_bytes);
    options_.scheduler.prefix_cache_blocks = std::max<int64_t>(1, static_cast<int64_t>(options_.prefix_cache_bytes / per_block));
  }
  scheduler_ = std::make_unique<Scheduler>(engine, options_.scheduler, [this](const StepReport& r) { observe_step(r); });
  loop_ = std::thread([this] { scheduler_->run_until_stopped(); });
  ready_ = true;
}

void Server::drain() {
  draining_ = true;
  http_->stop_accepting();
  if (scheduler_) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.drain_timeout_s);
    while (!scheduler_->idle() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    scheduler_->stop();
    if (loop_.joinable()) loop_.join();
    // What the drain timeout cuts loses its connection first, so that a cut stream ends without
    // its finish chunk and [DONE] (a client must not take it for a whole answer).
    if (!scheduler_->idle()) http_->shutdown();
    scheduler_->cancel_all(FinishReason::kCancelled);
  }
  http_->shutdown();
  scheduler_.reset();  // gives its cache blocks back to the engine while that is alive
}

void Server::observe_step(const StepReport& r) {
  metrics_.step_batch_tokens.observe(static_cast<double>(r.tokens));
  metrics_.step_batch_sequences.observe(static_cast<double>(r.sequences));
  const SchedulerStats s = scheduler_->stats();
  set_gauges(s);
  metrics_.prefix_cache_hit_tokens.inc(static_cast<double>(s.prefix_hit_tokens - last_stats_.prefix_hit_tokens));
  metrics_.prefix_cache_query_tokens.inc(static_cast<double>(s.prefix_query_tokens - last_stats_.prefix_query_tokens));
  last_stats_ = s;
}

void Server::set_gauges(const SchedulerStats& s) {
  metrics_.requests_running.set(static_cast<double>(s.running));
  metrics_.requests_waiting.set(static_cast<double>(s.waiting));
  metrics_.kv_blocks_used.set(static_cast<double>(s.kv_blocks_used));
  metrics_.kv_blocks_free.set(static_cast<double>(s.kv_blocks_free));
  metrics_.kda_slots_used.set(static_cast<double>(s.state_slots_used));
  metrics_.prefix_cache_blocks.set(static_cast<double>(s.cached_blocks));
}

void Server::log(const JobSummary& job) const {
  if (options_.json_logs) {
    nlohmann::ordered_json j{{"endpoint", job.endpoint}, {"status", job.status}, {"prompt_tokens", job.prompt_tokens},
                             {"completion_tokens", job.completion_tokens}, {"seconds", job.seconds}};
    if (!job.error.empty()) j["error"] = job.error;
    std::fprintf(stderr, "%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(stderr, "%s %d prompt=%lld completion=%lld %.3fs%s%s\n", job.endpoint.c_str(), job.status,
                 static_cast<long long>(job.prompt_tokens), static_cast<long long>(job.completion_tokens), job.seconds,
                 job.error.empty() ? "" : " error=", job.error.c_str());
  }
}

void Server::handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  try {
    route(request, exchange);
  } catch (const ApiError& e) {
    exchange->respond(e.status(), "application/json", e.body());
    metrics_.requests.inc(1, std::to_string(e.status()));
  } catch (const std::exception& e) {
    // Nothing a client sends gets here: the API layer turns every bad input into an ApiError.
    exchange->respond_error(500, std::string("internal error: ") + e.what());
    metrics_.requests.inc(1, "500");
  }
}

void Server::route(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) {
  const std::string path = path_of(request.target);
  const Route* found = nullptr;
  for (const Route& r : kRoutes) {
    if (path == r.path) found = &r;
  }
  if (found == nullptr) throw ApiError(404, "no route " + quote_bytes(path, 128), "", "not_found");
  if (request.method != found->method) {
    exchange->respond(405, "application/json",
                      ApiError(405, "method " + quote_bytes(request.method) + " is not allowed on " + path + " (use " +
                                        found->method + ")").body(),
                      {{"Allow", found->method}});
    metrics_.requests.inc(1, "405");
    return;
  }
  if (path == "/health") {
    const bool up = ready_ && !draining_;
    exchange->respond(up ? 200 : 503, "application/json",
                      std::string("{\"status\":\"") + (draining_ ? "draining" : ready_ ? "ok" : "loading") + "\"}");
    return;
  }
  if (path == "/metrics") {
    // The loop reports after each step; an idle loop (e.g. after a cancel) reports no step.
    if (ready_ && scheduler_) set_gauges(scheduler_->stats());
    exchange->respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render());
    return;
  }
  if (!options_.api_key.empty()) {
    const std::string auth = request.header("authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() <= prefix.size() || auth.compare(0, prefix.size(), prefix) != 0 ||
        !same_key(auth.substr(prefix.size()), options_.api_key)) {
      throw ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key", "",
                     "invalid_api_key");
    }
  }
  if (!ready_) throw ApiError(503, "the model is still loading", "", "loading");
  if (draining_) throw ApiError(503, "the server is shutting down", "", "draining");
  const ApiContext ctx{*tokenizer_, engine_->config(), options_.served_model_name, engine_->max_context(), options_.max_n};
  if (path == "/v1/models") {
    exchange->respond(200, "application/json", models_response(options_.served_model_name, created_, engine_->max_context()));
  } else if (path == "/tokenize") {
    exchange->respond(200, "application/json", tokenize_response(request.body, ctx));
  } else if (path == "/detokenize") {
    exchange->respond(200, "application/json", detokenize_response(request.body, ctx));
  } else {
    completion(request, exchange, path);
  }
}

void Server::completion(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange, const std::string& path) {
  const ApiContext ctx{*tokenizer_, engine_->config(), options_.served_model_name, engine_->max_context(), options_.max_n};
  CompletionJob::Setup setup;
  setup.endpoint = path;
  setup.timeout_s = options_.request_timeout_s;
  RequestCommon common;
  auto head = [&](const char* prefix) {
    return ResponseHead{new_response_id(prefix), options_.served_model_name, unix_seconds_now(), common.stream && common.include_usage};
  };
  std::optional<grammar::Grammar> reply;  // the chat reply's grammar, when constrained
  if (path == "/v1/responses") {
    ResponsesRequest r = parse_responses_request(request.body, ctx, *responses_);
    reply = r.chat.reply_grammar;
    setup.choices.push_back(choice_config(r.chat));
    common = r.chat;
    setup.output = responses_output(std::move(r), head("resp_"), responses_.get());
  } else if (path == "/v1/chat/completions") {
    ChatCompletionRequest r = parse_chat_request(request.body, ctx);
    reply = r.reply_grammar;
    for (int i = 0; i < r.n; ++i) setup.choices.push_back(choice_config(r));
    common = std::move(r);
    setup.output = chat_output(head("chatcmpl-"), common.stream);
  } else {
    CompletionRequest r = parse_completion_request(request.body, ctx);
    for (int i = 0; i < r.n; ++i) setup.choices.push_back(choice_config(r));
    common = std::move(r);
    setup.output = completions_output(head("cmpl-"), common.stream);
  }
  setup.stream = common.stream;
  setup.prompt_tokens = static_cast<int64_t>(common.gen.prompt.size());
  const grammar::CompiledGrammarPtr constrained = reply ? compiled(*reply) : nullptr;
  std::vector<RequestSpec> specs;
  for (int i = 0; i < common.n; ++i) {
    const GenerationParams g = choice_params(common.gen, i);
    specs.push_back({g.prompt, g.max_tokens, g.sampling, g.stop_token_ids, g.top_logprobs, std::nullopt});
    if (!constrained) continue;
    auto constraint = std::make_shared<GrammarConstraint>(constrained, engine_->config().tokens.eos);
    const std::string field = path == "/v1/responses" ? "max_output_tokens" : "max_tokens";
    try {
      constraint->require_budget(g.max_tokens, field);
    } catch (const Error& e) {
      throw ApiError(400, field + " " + e.detail(), field);
    }
    specs.back().constraint = std::move(constraint);
  }
  auto job = std::make_shared<CompletionJob>(std::move(setup), *tokenizer_, exchange, metrics_,
                                             [this](const JobSummary& s) { log(s); });
  try {
    job->start(*scheduler_, std::move(specs));
  } catch (const Error& e) {
    // The queue is full (retry later), or the request can never fit the cache.
    if (e.where().field == "max_queue") throw ApiError(503, "the server is busy: " + e.detail(), "", "queue_full");
    throw ApiError(400, e.detail(), e.where().field == "max_tokens" ? "max_tokens" : "", "context_length_exceeded");
  }
}

grammar::CompiledGrammarPtr Server::compiled(const grammar::Grammar& reply) {
  grammar::VocabularyPtr vocab;
  {
    std::lock_guard lock(grammar_mutex_);
    if (!grammar_vocab_) {
      grammar_vocab_ = grammar::TokenVocabulary::from_tokenizer(*tokenizer_, static_cast<uint32_t>(engine_->config().vocab_size));
    }
    vocab = grammar_vocab_;
  }
  try {
    return grammars_.gbnf(reply.to_gbnf(), vocab);
  } catch (const Error& e) {
    throw ApiError(400, "the reply grammar cannot be built: " + e.detail(), "response_format", "invalid_request_error");
  }
}

}  // namespace k3::server
