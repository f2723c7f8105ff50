// The real `k3 serve` process over raw sockets, on tiny checkpoints: the SSE framing of streamed
// completions, malformed and hostile HTTP (each answered with its status and an OpenAI error object,
// the process still healthy after), the API key, a client disconnecting mid-stream and the request
// timeout (both must give every cache block and state slot back).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/serve/serve_process.h"

namespace k3::server::test {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr const char* kKey = "test-key";

// A tiny checkpoint of `arch`, made once per test process.
const std::string& tiny_model(const std::string& arch) {
  static std::map<std::string, std::string> made;
  auto it = made.find(arch);
  if (it != made.end()) return it->second;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/serve-" + arch;
  const auto r = k3::test::run_k3("make-tiny --arch " + arch + " --out " + dir + " --seed 3");
  EXPECT_EQ(r.code, 0) << r.err;
  return made.emplace(arch, dir).first->second;
}

// A server on a tiny `arch` model with the API key and a 1 s header timeout, plus `extra` flags.
std::unique_ptr<ServeProcess> serve(const std::string& arch, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--threads", "2", "--api-key", kKey, "--http-header-timeout", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string& model = tiny_model(arch);
  auto p = std::make_unique<ServeProcess>(model, args, model + ".serve.log");
  EXPECT_GT(p->port(), 0) << p->stderr_text();
  return p;
}

std::string model_name(const std::string& arch) { return "serve-" + arch; }

void expect_error_object(const RawClient::Response& r, int status, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << "\n" << r.head << r.body;
  EXPECT_TRUE(r.ok) << what;
  const Json j = Json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << what << ": " << r.body;
  ASSERT_TRUE(j.contains("error") && j["error"].is_object()) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
  EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("code")) << r.body;
}

void expect_healthy(ServeProcess& p) {
  ASSERT_TRUE(p.alive()) << p.stderr_text();
  EXPECT_EQ(http_request(p.port(), "GET", "/health").status, 200) << p.stderr_text();
}

// Polls /metrics until nothing runs, waits or holds a slot and the only used cache blocks are the
// prefix cache's (none with the prefix cache off); fails after `timeout_s`.
void expect_all_released(ServeProcess& p, bool prefix_cache, double timeout_s = 5) {
  const auto t0 = Clock::now();
  std::map<std::string, double> m;
  for (;;) {
    m = metrics_of(p.port());
    const bool blocks_ok = prefix_cache ? m["k3_kv_blocks_used"] == m["k3_prefix_cache_blocks"] : m["k3_kv_blocks_used"] == 0;
    if (m.count("k3_requests_running") && m["k3_requests_running"] == 0 && m["k3_requests_waiting"] == 0 &&
        m["k3_kda_slots_used"] == 0 && blocks_ok)
      break;
    if (seconds_since(t0) > timeout_s) {
      ADD_FAILURE() << "not released after " << timeout_s << " s: running " << m["k3_requests_running"] << " waiting "
                    << m["k3_requests_waiting"] << " slots " << m["k3_kda_slots_used"] << " kv used " << m["k3_kv_blocks_used"]
                    << " prefix cache " << m["k3_prefix_cache_blocks"];
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!prefix_cache) {
    EXPECT_EQ(m["k3_prefix_cache_blocks"], 0);
  }
}

// A POST of `body` (JSON) with the key, on `c`, kept alive.
bool post(RawClient& c, const std::string& path, const std::string& body) {
  return c.send("POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kKey +
                "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

// Checks a streamed response: 200, chunked text/event-stream, every event "data: {json}\n\n", the
// finish chunk (then the usage chunk when asked) and "data: [DONE]" last. Returns the events' JSON.
std::vector<Json> expect_sse(const RawClient::Response& r, bool usage) {
  EXPECT_EQ(r.status, 200) << r.head << r.body;
  EXPECT_TRUE(r.ok && r.chunked) << r.head;
  EXPECT_TRUE(r.has("Content-Type: text/event-stream")) << r.head;
  EXPECT_EQ(r.body.substr(r.body.size() - 2), "\n\n");
  const std::vector<std::string> events = sse_events(r.body);
  std::vector<Json> out;
  EXPECT_GE(events.size(), usage ? 4u : 3u);
  if (events.size() < 3) return out;
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_FALSE(events[i].empty()) << "event " << i << " is not one data line: " << r.body;
    Json j = Json::parse(events[i], nullptr, false);
    EXPECT_TRUE(j.is_object()) << events[i];
    out.push_back(std::move(j));
  }
  const Json& last = out.back();
  const Json& finish = usage ? out[out.size() - 2] : last;
  if (usage) {
    EXPECT_TRUE(last["choices"].empty() && last["usage"].is_object()) << last.dump();
    EXPECT_GT(last["usage"].value("completion_tokens", 0), 0) << last.dump();
  }
  EXPECT_EQ(finish["choices"].size(), 1u) << finish.dump();
  if (!finish["choices"].empty()) {
    EXPECT_TRUE(finish["choices"][0]["finish_reason"].is_string()) << finish.dump();
  }
  for (size_t i = 0; i + (usage ? 2 : 1) < out.size(); ++i) {
    for (const Json& c : out[i]["choices"]) EXPECT_TRUE(c["finish_reason"].is_null()) << out[i].dump();
  }
  return out;
}

class ServeByArch : public ::testing::TestWithParam<std::string> {};

TEST_P(ServeByArch, StreamedCompletionsAreWellFramedSse) {
  auto p = serve(GetParam());
  const std::string model = "\"model\":\"" + model_name(GetParam()) + "\"";
  for (bool usage : {false, true}) {
    const std::string opts = usage ? ",\"stream_options\":{\"include_usage\":true}" : "";
    RawClient c(p->port(), 30);
    // Both endpoints on one kept-alive connection: the chunked stream ends cleanly.
    ASSERT_TRUE(post(c, "/v1/completions", "{" + model + ",\"prompt\":\"Once upon a time\",\"max_tokens\":12,"
                                           "\"temperature\":0,\"stream\":true" + opts + "}"));
    const auto text = expect_sse(c.read_response(), usage);
    for (size_t i = 0; i + 1 < text.size(); ++i) EXPECT_EQ(text[i]["object"], "text_completion");
    ASSERT_TRUE(post(c, "/v1/chat/completions", "{" + model + ",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                                                "\"max_tokens\":12,\"temperature\":0,\"stream\":true" + opts + "}"));
    const auto chat = expect_sse(c.read_response(), usage);
    ASSERT_FALSE(chat.empty());
    EXPECT_EQ(chat[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(chat[0]["choices"][0]["delta"]["role"], "assistant") << chat[0].dump();
  }
  expect_healthy(*p);
}

// The model divided among in-process ranks (`--expert-parallel 3`; `--tensor-parallel 2` within
// `--expert-parallel 4`) serves the same sampled choices as one rank: the logits are bit-identical.
TEST_P(ServeByArch, ParallelLayoutsServeTheSameChoices) {
  const std::string body = "{\"model\":\"" + model_name(GetParam()) +
                           "\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":16,"
                           "\"temperature\":1,\"seed\":4,\"n\":3}";
  std::vector<Json> choices;
  for (const std::vector<std::string>& layout : std::vector<std::vector<std::string>>{
           {"--expert-parallel", "1"}, {"--expert-parallel", "3"}, {"--tensor-parallel", "2", "--expert-parallel", "4"}}) {
    auto p = serve(GetParam(), layout);
    const RawClient::Response r = http_request(p->port(), "POST", "/v1/chat/completions", body, kKey);
    ASSERT_EQ(r.status, 200) << r.body << p->stderr_text();
    choices.push_back(Json::parse(r.body)["choices"]);
  }
  EXPECT_EQ(choices[1], choices[0]);
  EXPECT_EQ(choices[2], choices[0]);
  EXPECT_EQ(choices[0].size(), 3u);
}

// A long stream whose client goes away after a few events: every choice is cancelled and its
// blocks and slot come back (with the prefix cache off, no block stays used at all).
TEST_P(ServeByArch, DisconnectMidStreamReleasesEverything) {
  for (bool prefix_cache : {true, false}) {
    SCOPED_TRACE(prefix_cache ? "prefix cache on" : "prefix cache off");
    auto p = serve(GetParam(), {"--prefix-cache", prefix_cache ? "on" : "off"});
    std::string prompt;
    for (int i = 0; i < 40; ++i) prompt += "word" + std::to_string(i) + " ";  // a few cache blocks
    RawClient c(p->port(), 30);
    ASSERT_TRUE(post(c, "/v1/completions", "{\"model\":\"" + model_name(GetParam()) + "\",\"prompt\":\"" + prompt +
                                               "\",\"max_tokens\":2000,\"ignore_eos\":true,\"stream\":true}"));
    ASSERT_NE(c.read_until("\r\n\r\n"), "");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.read_chunk().has_value()) << "event " << i;
    const auto busy = metrics_of(p->port());
    EXPECT_EQ(busy.at("k3_requests_running"), 1);
    EXPECT_GT(busy.at("k3_kv_blocks_used"), 0);
    c.close();
    expect_all_released(*p, prefix_cache);
    EXPECT_EQ(metrics_of(p->port())["k3_requests_total{status=\"499\"}"], 1) << p->stderr_text();
    expect_healthy(*p);
    EXPECT_EQ(http_request(p->port(), "POST", "/v1/completions",
                           "{\"prompt\":\"" + prompt + "\",\"max_tokens\":4}", kKey).status, 200);
    expect_all_released(*p, prefix_cache);
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, ServeByArch, ::testing::Values("kimi-k3", "kimi-linear"),
                         [](const auto& info) { return info.param == "kimi-k3" ? "K3" : "Linear"; });

TEST(ServeFaults, MalformedHttpGetsAnErrorObjectAndTheServerLivesOn) {
  auto p = serve("kimi-k3");
  const std::string big = std::to_string((8 << 20) + 1);
  const std::vector<std::pair<std::string, int>> cases = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET /health HTTP/9\r\n\r\n", 400},
      {"GET /health HTTP/1.1\r\nNo colon here\r\n\r\n", 400},
      {"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}", 400},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + big + "\r\n\r\n", 413},
      {"GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431},
  };
  for (const auto& [request, status] : cases) {
    RawClient c(p->port(), 10);
    ASSERT_TRUE(c.send(request));
    const auto r = c.read_response();
    expect_error_object(r, status, request.substr(0, 80));
    EXPECT_TRUE(c.wait_closed()) << request.substr(0, 80);
    expect_healthy(*p);
  }
  // Well-formed HTTP that the API refuses: not JSON, a wrong field, an unknown route and method.
  expect_error_object(http_request(p->port(), "POST", "/v1/completions", "{not json", kKey), 400, "bad JSON");
  expect_error_object(http_request(p->port(), "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":-3}", kKey), 400,
                      "bad max_tokens");
  expect_error_object(http_request(p->port(), "GET", "/v2/nothing", "", kKey), 404, "unknown route");
  expect_error_object(http_request(p->port(), "DELETE", "/v1/completions", "", kKey), 405, "wrong method");
  expect_healthy(*p);
}

TEST(ServeFaults, SlowlorisIsCutAtTheHeaderTimeout) {
  auto p = serve("kimi-k3");
  RawClient c(p->port(), 0.05);
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(40, 'a') + "\r\n\r\n";
  const auto t0 = Clock::now();
  bool closed = false;
  for (char ch : request) {
    if (!c.send(std::string(1, ch)) || seconds_since(t0) > 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!c.fill() && c.eof()) {
      closed = true;
      break;
    }
  }
  if (!closed) {
    c.set_timeout(3);
    closed = c.wait_closed();
  }
  EXPECT_TRUE(closed);
  EXPECT_GE(seconds_since(t0), 0.9);
  EXPECT_LT(seconds_since(t0), 3.0);
  expect_healthy(*p);
}

TEST(ServeFaults, ApiKeyGuardsTheApiButNotHealthOrMetrics) {
  auto p = serve("kimi-k3");
  for (const std::string& key : {std::string(), std::string("wrong-key"), std::string(kKey) + "x"}) {
    for (const char* path : {"/v1/models", "/v1/completions", "/v1/chat/completions", "/tokenize"}) {
      const bool get = std::string(path) == "/v1/models";
      const auto r = http_request(p->port(), get ? "GET" : "POST", path, get ? "" : "{\"prompt\":\"a\"}", key);
      expect_error_object(r, 401, std::string(path) + " key '" + key + "'");
      EXPECT_NE(r.body.find("invalid_api_key"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(http_request(p->port(), "GET", "/health").status, 200);
  const auto m = http_request(p->port(), "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("k3_requests_running"), std::string::npos);
  EXPECT_EQ(http_request(p->port(), "GET", "/v1/models", "", kKey).status, 200);
}

TEST(ServeFaults, RequestTimeoutIs408AndReleasesEverything) {
  auto p = serve("kimi-k3", {"--request-timeout", "1"});
  const auto t0 = Clock::now();
  const auto r = http_request(p->port(), "POST", "/v1/completions",
                              "{\"prompt\":\"tell me a long story\",\"max_tokens\":2000,\"ignore_eos\":true}", kKey);
  const double took = seconds_since(t0);
  expect_error_object(r, 408, "request timeout");
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 10.0);
  expect_all_released(*p, true);
  EXPECT_EQ(metrics_of(p->port())["k3_requests_total{status=\"408\"}"], 1);
  expect_healthy(*p);
}

TEST(ServeFaults, SigtermExitsZero) {
  auto p = serve("kimi-linear", {"--drain-timeout", "5"});
  expect_healthy(*p);
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait_exit(10), 0) << p->stderr_text();
}

}  // namespace
}  // namespace k3::server::test
